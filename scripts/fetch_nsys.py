#!/usr/bin/env python3
"""Fetch a real `nsys` (Nsight Systems 2023.4.4) from Debian, without installing anything.

    python scripts/fetch_nsys.py [--dest DIR]

Downloads Debian's `nsight-systems` and `nsight-systems-target` packages from the `non-free`
component of the *trixie* suite, on the Debian mirror this machine's apt already uses, and
unpacks them with `dpkg -x` into DIR (default `$COLLECTIVETRACE_NSYS_DIR`, else
`~/.cache/collectivetrace-nsys/nsys-2023.4`). The system's apt configuration and state are left
alone: apt runs with a private sources list, lists folder and cache, all in a temporary folder.
Runs again do nothing once the nsys binary is there. The last line on stdout is the path of the
nsys CLI; on failure, one line on stderr and exit status 1.

`nsys export` needs no extra library: the CLI under `target-linux-x64/` runs on its own (only the
host-side `QdstrmImporter`, used to *record* reports, also needs Debian's `libssh-4`).

Importable: `fetch(dest=None) -> Path` returns the nsys path, raises RuntimeError on failure.
Stdlib only.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("nsight-systems-target", "nsight-systems")
UPSTREAM_VERSION = "2023.4.4"  # Debian versions look like 2023.4.4.54~12.4.1-2
SUITE = "trixie"
COMPONENT = "non-free"
NSYS_REL = "usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# About 190 MB of packages plus 680 MB unpacked (measured: the line it prints says), with some slack.
NEEDED_BYTES = 1_000_000_000

# Suites that name the Debian archive itself (as opposed to a third-party repository).
_DEBIAN_SUITES = {
    "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
    "oldoldstable", "oldstable", "stable", "testing", "unstable",
}


def default_dest() -> Path:
    env = os.environ.get("COLLECTIVETRACE_NSYS_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "collectivetrace-nsys" / "nsys-2023.4"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _usable_nsys(dest: Path) -> Path | None:
    """The unpacked nsys, resolved through any symlink, if it is there and executable."""
    path = (dest / NSYS_REL).resolve()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    return None


def _apt_sources() -> list[tuple[list[str], list[str], list[str], str | None]]:
    """(URIs, suites, components, signed-by) of every enabled `deb` source apt reads."""
    entries = []
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for name in files:  # one-line format: deb [opts] uri suite comp...
        try:
            lines = Path(name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            m = re.match(r"deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
            if not m:
                continue
            opts, uri, suite, comps = m.groups()
            signed = re.search(r"signed-by=(\S+)", opts or "")
            entries.append(([uri], [suite], comps.split(), signed.group(1) if signed else None))
    for name in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):  # deb822 stanzas
        try:
            text = Path(name).read_text(errors="replace")
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            key = None
            for line in stanza.splitlines():
                if line.startswith("#"):
                    continue
                if line[:1] in (" ", "\t") and key:  # continuation line
                    fields[key] += "\n" + line.strip()
                elif ":" in line:
                    key, value = line.split(":", 1)
                    key = key.strip().lower()
                    fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            signed = fields.get("signed-by")
            if signed and ("\n" in signed or signed.startswith("-----")):
                signed = None  # an inline key block: fall back to Debian's keyring file
            entries.append((fields.get("uris", "").split(), fields.get("suites", "").split(),
                            fields.get("components", "").split(), signed))
    return entries


def debian_mirror() -> tuple[str, str | None]:
    """The Debian archive mirror apt already uses (not the security one), and its keyring."""
    for uris, suites, _comps, signed in _apt_sources():
        if not any(s.split("-")[0].split("/")[0] in _DEBIAN_SUITES and "security" not in s
                   for s in suites):
            continue
        for uri in uris:
            if "security" not in uri:
                return uri.rstrip("/"), signed
    return DEFAULT_MIRROR, None  # no Debian source configured: use Debian's own redirector


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    """Run a command; on failure raise RuntimeError with its last error line."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace")
    except OSError as exc:
        raise RuntimeError(f"cannot run {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        lines = [l.strip() for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        errors = [l for l in lines if l.startswith(("E:", "dpkg"))] or lines or ["(no output)"]
        raise RuntimeError(f"{Path(cmd[0]).name} {cmd[1]} failed: {errors[-1]}")
    return proc.stdout


def _sizes(show: str) -> tuple[int, int]:
    """(download bytes, unpacked bytes) of the packages `apt-cache show` describes (its first
    stanza per package: the version asked for)."""
    download = unpacked = 0
    seen = set()
    for stanza in re.split(r"\n\s*\n", show.strip()):
        fields = dict(re.findall(r"^([\w-]+):\s*(.*)$", stanza, re.M))
        if fields.get("Package") in seen or "Package" not in fields:
            continue
        seen.add(fields["Package"])
        download += int(fields.get("Size", 0))
        unpacked += int(fields.get("Installed-Size", 0)) * 1024  # KiB
    return download, unpacked


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def _download(work: Path, dest: Path) -> list[Path]:
    """Download the two .deb files into work/debs with a private apt setup; return them."""
    mirror, keyring = debian_mirror()
    if keyring is None and Path(DEFAULT_KEYRING).is_file():
        keyring = DEFAULT_KEYRING
    opts = f"[arch=amd64 signed-by={keyring}]" if keyring else "[arch=amd64]"
    sources = work / "sources.list"
    sources.write_text(f"deb {opts} {mirror} {SUITE} {COMPONENT}\n")
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    # The system's apt.conf (proxy, auth) still applies, but not its hooks: those run after
    # every `apt-get update` and would refresh or clean system caches (PackageKit, AppStream,
    # docker-clean).
    conf = work / "apt.conf"
    conf.write_text("".join(f"#clear {hook};\n" for hook in (
        "APT::Update::Pre-Invoke", "APT::Update::Post-Invoke",
        "APT::Update::Post-Invoke-Success", "DPkg::Pre-Invoke", "DPkg::Post-Invoke")))
    # Point every piece of apt state at the temporary folder; system pins are ignored too so
    # they cannot hide the version we want.
    apt_opts = [
        f"-c{conf}",
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/dev/null",
        "-oDir::Etc::Preferences=/dev/null",
        "-oDir::Etc::PreferencesParts=/dev/null",
        f"-oDir::State::Lists={work / 'lists'}",
        f"-oDir::Cache={work / 'cache'}",
        "-oAPT::Get::List-Cleanup=false",
    ]
    if os.geteuid() == 0:
        # apt would drop to the `_apt` user, which cannot write into our private folder.
        apt_opts.append("-oAPT::Sandbox::User=root")

    # `apt-get update` exits 0 even when the mirror cannot be reached: look for its warning.
    proc = subprocess.run(["apt-get", *apt_opts, "-q", "update"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace")
    lines = (proc.stderr + proc.stdout).splitlines()
    failed = ([l for l in lines if l.startswith("E:")]
              or [l for l in lines if l.startswith("W: Failed to fetch")])
    if proc.returncode != 0 or failed:
        why = failed[0].strip() if failed else f"exit status {proc.returncode}"
        raise RuntimeError(f"apt-get update failed: {why}")

    # Pick the Debian revision of 2023.4.4 on offer (e.g. 2023.4.4.54~12.4.1-2).
    out = _run(["apt-cache", *apt_opts, "madison", PACKAGES[0]])
    versions = [line.split("|")[1].strip() for line in out.splitlines() if line.count("|") >= 2]
    wanted = [v for v in versions if v.startswith(UPSTREAM_VERSION + ".")
              or v.startswith(UPSTREAM_VERSION + "~")]
    if not wanted:
        found = ", ".join(versions) or "none"
        raise RuntimeError(f"{mirror} {SUITE}/{COMPONENT} has no {PACKAGES[0]} "
                           f"{UPSTREAM_VERSION} (found: {found})")
    version = wanted[0]  # madison lists the highest version first

    # The one line a user sees: what comes from where, how big, and where it goes.
    download, unpacked = _sizes(_run(["apt-cache", *apt_opts, "show", *(f"{p}={version}" for p in PACKAGES)]))
    _log(f"fetch_nsys: downloading Debian's {' and '.join(PACKAGES)} {version} from {mirror} "
         f"({_mb(download)}), unpacked into {dest} ({_mb(unpacked)}); once, reused by later runs")
    _run(["apt-get", *apt_opts, "-q", "download", *(f"{p}={version}" for p in PACKAGES)],
         cwd=work / "debs")
    debs = sorted((work / "debs").glob("*.deb"))
    if len(debs) != len(PACKAGES):
        raise RuntimeError(f"apt-get download left {len(debs)} packages, expected {len(PACKAGES)}")
    return debs


def fetch(dest: Path | None = None) -> Path:
    """Make sure nsys 2023.4.4 is unpacked in `dest` and return the path of its CLI.

    Raises RuntimeError, with a one-line reason, when it cannot be had.
    """
    dest = Path(dest).expanduser() if dest is not None else default_dest()
    dest = dest.absolute()
    try:
        return _fetch(dest)
    except OSError as exc:  # disk full, permissions, a file where a folder should be...
        raise RuntimeError(f"cannot fetch nsys into {dest}: {exc}") from exc


def _fetch(dest: Path) -> Path:
    nsys = _usable_nsys(dest)
    if nsys is not None:
        return nsys  # already fetched: nothing to do

    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError("Debian's nsight-systems packages are for x86_64 Linux only")
    for tool in ("apt-get", "apt-cache", "dpkg"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: fetching nsys needs a Debian-like system")
    if dest.exists() and any(dest.iterdir()):
        raise RuntimeError(f"{dest} exists but holds no {NSYS_REL}; remove it and retry")

    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if free < NEEDED_BYTES:
        raise RuntimeError(f"not enough disk space in {dest.parent}: "
                           f"{free / 1e9:.1f} GB free, about {NEEDED_BYTES / 1e9:.0f} GB needed")

    # Work next to dest, so the finished tree is renamed into place in one step: an interrupted
    # run never leaves a half-unpacked dest behind, only a temporary folder that gets removed.
    with tempfile.TemporaryDirectory(prefix=".fetch-nsys-", dir=dest.parent) as tmp:
        work = Path(tmp)
        debs = _download(work, dest)
        root = work / "root"
        for deb in debs:
            _run(["dpkg", "-x", str(deb), str(root)])
        nsys = _usable_nsys(root)
        if nsys is None:
            raise RuntimeError(f"the packages did not contain {NSYS_REL}")
        _run([str(nsys), "--version"])  # proves it runs here before we keep it
        try:
            if dest.exists():
                dest.rmdir()  # empty (checked above), unless another run just filled it
            os.rename(root, dest)
        except OSError:
            # Another run may have finished first; its copy is as good as ours.
            if _usable_nsys(dest) is None:
                raise
    nsys = _usable_nsys(dest)
    if nsys is None:
        raise RuntimeError(f"{dest / NSYS_REL} missing after unpacking")
    return nsys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None,
                        help="folder to unpack into (default: $COLLECTIVETRACE_NSYS_DIR or "
                             "~/.cache/collectivetrace-nsys/nsys-2023.4)")
    args = parser.parse_args(argv)
    try:
        nsys = fetch(args.dest)
    except RuntimeError as exc:
        print(f"fetch_nsys: {exc}", file=sys.stderr)
        return 1
    print(nsys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
