"""Every real set's terminal output in a real 80-column terminal (tmux), as a user meets it (issue 21):
no header or figure cut ('confiden…'), no word broken across lines ('0' / 'ms', 'fs24-allreduce2x-9rank-3'
/ 'node'), no line over 80 columns, and kernels that share a short name told apart by the part of
their template arguments that differs (the DLRM traces' four 'vectorized_elementwise_kernel's),
never by their 6-line demangled names; a lambda's kernel by the function it is defined in (the HTA
traces'), each listed name on at most two lines."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import FIXTURES, REAL, need_real

SETS = ["fs24-allreduce2x-9rank-3node", "fs24-ring-6rank-2node", "nccl-net-2rank-2node", "nsys-ai-2gpu",
        "kineto/hta-trace_filter-2rank", "kineto/param-dlrm-8rank"]
# Where a name may break between lines: after a '-', '_' or '/', or before a '.' (a host's labels).
SEPARATORS = "-_/"


def tmux_capture(*args: str, width: int = 80) -> str:
    """What `python -m nsys_collective ARGS` shows in a tmux pane `width` columns wide (stdout and
    stderr, the scrollback included)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux not found: the 80-column captures need it")
    socket, done = f"ct-{uuid.uuid4().hex[:8]}", "ct-done"
    command = " ".join(["exec >/dev/tty 2>&1;", sys.executable, "-m", "nsys_collective", *map(_quote, args),
                        f"; tmux -L {socket} wait-for -S {done}; sleep 600"])
    try:
        subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-x", str(width), "-y", "50", command], check=True)
        subprocess.run(["tmux", "-L", socket, "wait-for", done], check=True, timeout=600)
        return subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-S", "-", "-E", "-"], check=True,
                              capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def piped(*args: str) -> str:
    """The same command's output through a pipe: each sentence and table row on one line."""
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", *args], capture_output=True, text=True, timeout=600)
    return proc.stdout + proc.stderr


def assert_fits_80(narrow: str, wide: str) -> None:
    """No line over 80 columns, nothing cut ('…' only where the wide output has it too), and every
    word the wide output has whole either whole or broken between its parts at a line's end."""
    lines = [line.split() for line in narrow.rstrip("\n").splitlines()]
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert narrow.count("…") == wide.count("…"), "something was cut to fit 80 columns"
    words = set(wide.split())
    for k, line in enumerate(lines):
        if " ".join(line).endswith(", by #:"):  # the title of a list of names under its table
            continue
        for word in line:
            if word in words or re.fullmatch(r"[\d.,:+-]+|─+|#", word):  # a rule; a figure (a batch's seconds)
                continue
            assert any(_part_of(word, w) for w in words), f"line {k + 1} breaks a word inside: {' '.join(line)!r}"


def _part_of(piece: str, word: str) -> bool:
    """Whether piece is word's parts from one break between parts to another."""
    at = word.find(piece)
    while at >= 0:
        end = at + len(piece)
        if (at == 0 or word[at - 1] in SEPARATORS or piece[0] == ".") and \
                (end == len(word) or piece[-1] in SEPARATORS or word[end] == "."):
            return True
        at = word.find(piece, at + 1)
    return False


def listed_names(text: str) -> list[list[str]]:
    """The names listed under the tables ('kernel, by #:'), each as the lines it takes: a number
    right-aligned in the list's first column, then the name, continued on indented lines."""
    entries: list[list[str]] = []
    width = None  # of the number column, once the list's first line is read
    for line in text.splitlines():
        if line.rstrip().endswith(", by #:"):
            width = -1
        elif width == -1 and (m := re.match(r" *\d+ \S", line)):
            width = m.end() - 2
            entries.append([line])
        elif width and width > 0 and line[:width].strip().isdigit() and line[width:width + 1] == " ":
            entries.append([line])
        elif width and width > 0 and entries and not line[:width + 1].strip() and line[width + 1:].strip():
            entries[-1].append(line)
        else:
            width = None
    return entries


def test_the_listed_names_check_counts_each_names_lines():
    text = ("kernel, by #:\n 9 gemm\n10 vectorized_elementwise_kernel<…, at::native::(anonymous\n   namespace)::f, …>\n"
            "\nStragglers\nrank  host\n")
    assert listed_names(text) == [[" 9 gemm"], ["10 vectorized_elementwise_kernel<…, at::native::(anonymous", "   namespace)::f, …>"]]


@pytest.mark.parametrize("name", SETS)
def test_analyze_of_every_real_set_fits_80_columns(name):
    folder = str(need_real(REAL / name))
    narrow = tmux_capture("analyze", folder)
    assert "Ranks" in narrow and "What each figure means" in narrow
    assert_fits_80(narrow, piped("analyze", folder))
    # A kernel name takes a line or two: a lambda's scope and parameter lists, which made the HTA
    # traces' elementwise kernels four lines each, are left to --json.
    assert all(len(entry) <= 2 for entry in listed_names(narrow)), [e for e in listed_names(narrow) if len(e) > 2]


def test_kernels_sharing_a_short_name_are_told_apart_by_what_differs():
    folder = str(need_real(REAL / "kineto" / "param-dlrm-8rank"))
    narrow = tmux_capture("analyze", folder)
    table = narrow[narrow.index("What slowed the transfers"):]
    table = table[:min(table.index(end) for end in ("What NCCL slowed", "Stragglers") if end in table)]
    labels = re.findall(r"vectorized_elementwise_kernel\S*(?: \S+)*", table)
    assert sorted(labels) == ["vectorized_elementwise_kernel<…, AUnaryFunctor, …>",
                              "vectorized_elementwise_kernel<…, BinaryFunctor, …>",
                              "vectorized_elementwise_kernel<…, FillFunctor<float>, …>",
                              "vectorized_elementwise_kernel<…, FillFunctor<int>, …>"], table
    assert "at::native::" not in narrow and "Array<char*" not in narrow  # no demangled name spread over lines


def test_batch_and_compare_fit_80_columns(tmp_path):
    need_real(REAL / "fs24-ring-6rank-2node")
    # A short, fixed nsys path: batch names it in its errors, and a temporary path's length varies by worker.
    db = f"sqlite:///{tmp_path / 'store.db'}"
    for args in (["batch", str(REAL), "--db", db, "--nsys", "/no/nsys"],
                 ["compare", str(REAL / "fs24-ring-6rank-2node"), str(REAL / "fs24-allreduce2x-9rank-3node")],
                 ["compare", str(FIXTURES / "demo-4rank-2host"), str(REAL / "nsys-ai-2gpu")]):
        narrow = tmux_capture(*args)
        if args[0] == "batch":  # stored now: a second run would say "skipped" where the first said "analyzed"
            (tmp_path / "store.db").unlink()
        assert_fits_80(narrow, piped(*args))
