//! `cargo bench -p collectivetrace-bench --bench replay`: the what-if graph on a synthetic 8-rank job of ~1M GPU ops (plus
//! ~1.1M host calls), simulated by `whatif::synth` (`Spec::bench()`: launches per op, compute, side
//! and NCCL streams, stream waits by events, CUDA graphs, syncs, a collective every ~600 ops,
//! jitter). Prints the job's size, the graph's build time and memory once, then times the build,
//! one replay (no change, one shortened kernel, every slack zeroed) and a batch of replays.
//! Target: a replay under 20 ms single-threaded.

use collectivetrace_core::whatif::synth::{self, Spec};
use collectivetrace_core::whatif::{Change, Graph, Options, ReplayOptions};
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Instant;

/// This process's resident memory now and at its peak (kB), from /proc (Linux).
fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn replay(c: &mut Criterion) {
    let t = Instant::now();
    let s = synth::generate(&Spec::bench());
    let job = s.job.view();
    let (ops, calls) = (job.n_ops(), job.n_calls());
    eprintln!(
        "job: {ops} GPU ops, {calls} calls, {} collective members, {} sync and {} event records (simulated in {:.2} s)",
        s.job.member_op.len(),
        s.job.sync_rank.len(),
        s.job.event_rank.len(),
        t.elapsed().as_secs_f64()
    );
    let (rss0, _) = rss_kb();
    let t = Instant::now();
    let g = Graph::build(&job, &Options::default()).unwrap();
    let build_s = t.elapsed().as_secs_f64();
    let (rss1, peak) = rss_kb();
    let f = g.fidelity();
    eprintln!(
        "graph: built in {build_s:.3} s; {} nodes, {} edges; {:.1} MB held ({:.0} bytes per op); RSS +{:.1} MB after build, \
         peak {:.1} MB (job columns included); workspace {:.1} MB per thread",
        f.nodes,
        f.edges,
        g.heap_bytes() as f64 / 1e6,
        g.heap_bytes() as f64 / ops as f64,
        (rss1 as f64 - rss0 as f64) / 1e3,
        peak as f64 / 1e3,
        (g.n_nodes() * 8) as f64 / 1e6
    );
    eprintln!(
        "fidelity: explained {:.4}, start error p50 {} p99 {} ns, slack {} ns, recorded {} inferred {} unresolved {}",
        f.explained_start_share,
        f.start_error_p50,
        f.start_error_p99,
        f.slack_ns,
        f.recorded_dependencies,
        f.inferred_dependencies,
        f.unresolved_syncs
    );

    let mut group = c.benchmark_group("replay, 8 ranks, ~1M ops");
    group.sample_size(10).measurement_time(std::time::Duration::from_secs(20));
    group.bench_function("build", |b| b.iter(|| Graph::build(&job, &Options::default()).unwrap().n_nodes()));
    let opts = ReplayOptions::default();
    let mut ws = g.workspace();
    // Member ops are appended in op order, so member_op is sorted.
    let plain = |o: usize| s.job.member_op.binary_search(&(o as i64)).is_err();
    let kernel_at = |from: usize| (from..ops).find(|&o| plain(o)).unwrap();
    let changes = [
        ("replay: no change, 1 thread", Change::default()),
        ("replay: one kernel shortened, 1 thread", Change { op_durations: vec![(kernel_at(ops / 3), 0)], ..Change::default() }),
        ("replay: every slack zeroed, 1 thread", Change { zero_all_slack: true, ..Change::default() }),
    ];
    group.sample_size(30).measurement_time(std::time::Duration::from_secs(8));
    for (name, change) in &changes {
        group.bench_function(*name, |b| b.iter(|| g.replay(change, &mut ws, &opts).unwrap().total_wait));
    }
    let many: Vec<Change> = (0..16).map(|k| Change { op_durations: vec![(kernel_at(k * ops / 16), 0)], ..Change::default() }).collect();
    group.sample_size(10).measurement_time(std::time::Duration::from_secs(10));
    let n = many.len();
    let spare = std::sync::Mutex::default(); // the workspaces, kept between batches as the binding keeps them
    group.bench_function(format!("replay_many: {n} changes, 2 threads"), |b| b.iter(|| g.replay_many(&many, &opts, Some(2), &spare).unwrap().len()));
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
