//! What-if replay (docs/method.md section 4) on small hand-built jobs whose answers are worked out by
//! hand in the comments, on simulated jobs (`whatif::synth`, timed by rules of their own), and
//! against the simulator's own counterfactual: the same job simulated without the planted cause.

use collectivetrace_core::whatif::synth::{self, Plant, Rng, Spec};
use collectivetrace_core::whatif::{
    Change, EdgeKind, Graph, JobData, NodeKind, NodeRef, Options, Outcome, ReplayOptions, SyncType, WhatIfError,
};
use std::sync::Mutex;

/// Launch latency fixed at 10 ns and a 5 ns tolerance, so hand computations stay small.
fn options() -> Options {
    Options { tolerance_ns: 5, launch_latency_ns: Some(10), ..Options::default() }
}

fn build(job: &JobData) -> Graph {
    Graph::build(&job.view(), &options()).unwrap_or_else(|e| panic!("{e}"))
}

fn replay(g: &Graph, change: &Change) -> Outcome {
    g.replay(change, &mut g.workspace(), &ReplayOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn base(g: &Graph) -> Outcome {
    replay(g, &Change::default())
}

/// A launch: the call [call_start, call_end] on thread 0 and its op [start, end] on `stream`.
/// Returns (call row, op row). Correlation ids: the call row (unique within the job).
fn launch(job: &mut JobData, rank: i64, call: (i64, i64), stream: i64, op: (i64, i64), step: i64) -> (usize, usize) {
    let (corr, launch) = (job.call_rank.len() as i64, job.calls_of(rank));
    let c = job.call(rank, 0, call.0, call.1, corr, false, -1);
    let o = job.op(rank, stream, op.0, op.1, launch, step);
    (c, o)
}

/// A call with no op (an event record, a stream wait, a sync). Returns (row, correlation).
fn call(job: &mut JobData, rank: i64, span: (i64, i64), blocking: bool) -> (usize, i64) {
    let corr = job.call_rank.len() as i64;
    (job.call(rank, 0, span.0, span.1, corr, blocking, -1), corr)
}

#[test]
fn a_late_kernel_costs_the_other_ranks_its_excess_each() {
    // 3 ranks, one stream: K then the NCCL kernel N. K starts at 10 (launch 0 + 10) and runs 100,
    // 150 on rank 2 (50 planted). N arrives at K's end: 110, 110, 160. T = 160, x = 20.
    // W = 50 + 50 + 0 = 100. Fixing K on rank 2: all arrive at 110, W = 0: saved 50 x 2 ranks.
    let mut job = JobData::default();
    let mut k2 = 0;
    for r in 0..3 {
        let d = if r == 2 { 150 } else { 100 };
        let (_, k) = launch(&mut job, r, (0, 5), 1, (10, 10 + d), 0);
        let (_, n) = launch(&mut job, r, (6, 8), 1, (10 + d, 180), 0);
        job.member(0, n);
        if r == 2 {
            k2 = k;
        }
    }
    let g = build(&job);
    let b = base(&g);
    assert_eq!((b.transfer_start.clone(), b.wait.clone(), b.total_wait), (vec![160], vec![100], 100));
    assert_eq!(b.arrival, [110, 110, 160]);
    assert_eq!(b.step_end, [180]);
    let fixed = replay(&g, &Change { op_durations: vec![(k2, 100)], ..Change::default() });
    assert_eq!((fixed.transfer_start[0], fixed.total_wait), (110, 0));
    assert_eq!(b.total_wait - fixed.total_wait, 50 * 2);
    assert_eq!(fixed.step_end, [130]);
    assert_eq!(fixed.rank_end, [130, 130, 130]);
}

/// 2 ranks, DDP: compute stream 1 runs K1 (100 ns; `k1_rank1` on rank 1), K2 (60 ns); NCCL stream
/// 2 runs N1 then N2, each fenced after its bucket's kernel by cudaEventRecord +
/// cudaStreamWaitEvent (recorded); transfers take 30 ns. Times as a simulator would give them.
fn ddp_job(k1_rank1: i64) -> (JobData, usize) {
    let mut job = JobData::default();
    let mut k1_of_rank1 = 0;
    let t1 = 10 + k1_rank1.max(100); // N1's transfer start: the later K1 end
    let t2 = t1 + 60; // N2's: rank 1's K2 end (after N1's end, t1 + 30)
    for r in 0..2 {
        let d1 = if r == 1 { k1_rank1 } else { 100 };
        let (_, k1) = launch(&mut job, r, (0, 2), 1, (10, 10 + d1), 0);
        if r == 1 {
            k1_of_rank1 = k1;
        }
        let (_, rec) = call(&mut job, r, (3, 4), false);
        job.event(r, 1, 77, rec);
        let (_, wait) = call(&mut job, r, (5, 6), false);
        job.sync(r, SyncType::StreamWaitEvent, 2, 77, wait, -1);
        // N1: launch 7 + 10, waits for K1: arrives at K1's end.
        let (_, n1) = launch(&mut job, r, (7, 8), 2, (10 + d1, t1 + 30), 0);
        job.member(0, n1);
        // K2 (60) after K1 on the compute stream.
        let (_, _) = launch(&mut job, r, (9, 10), 1, (10 + d1, 70 + d1), 0);
        let (_, rec) = call(&mut job, r, (11, 12), false);
        job.event(r, 1, 77, rec); // the same event id, recorded again: the wait below must take this one
        let (_, wait) = call(&mut job, r, (13, 14), false);
        job.sync(r, SyncType::StreamWaitEvent, 2, 77, wait, -1);
        // N2: after N1 on its stream and after K2.
        let (_, n2) = launch(&mut job, r, (15, 16), 2, ((t1 + 30).max(70 + d1), t2 + 30), 0);
        job.member(1, n2);
    }
    (job, k1_of_rank1)
}

#[test]
fn lateness_carried_through_the_nccl_queue_is_credited_to_its_cause() {
    // Rank 1's K1 runs 150 instead of 100. N1: arrivals 110, 160: W1 = 50. N2: rank 0 arrives at
    // N1's end (190, queued behind N1), rank 1 at its K2's end (220): W2 = 30. Rank 1's K2 ran as
    // long as rank 0's, so a walk-back from N2 finds nothing; the replay fixing K1 gives T1 = 110,
    // N1 ends 140, both K2 end 170, N2 arrivals 170, 170: W2 = 0. Saved 50 + 30.
    let (job, k1) = ddp_job(150);
    let g = build(&job);
    let f = g.fidelity();
    assert_eq!((f.recorded_stream_waits, f.inferred_stream_waits, f.unresolved_syncs), (4, 0, 0));
    let b = base(&g);
    assert_eq!(b.wait, [50, 30]);
    assert_eq!(b.transfer_start, [160, 220]);
    let fixed = replay(&g, &Change { op_durations: vec![(k1, 100)], ..Change::default() });
    assert_eq!(fixed.wait, [0, 0]);
    assert_eq!(fixed.transfer_start, [110, 170]);
    assert_eq!(b.total_wait - fixed.total_wait, 80);
    assert_eq!(b.step_end[0] - fixed.step_end[0], 250 - 200);
    // The same trace, simulated without the late kernel, is exactly what the replay gives.
    let (truth_job, _) = ddp_job(100);
    assert_eq!(fixed, base(&build(&truth_job)));
}

#[test]
fn fixing_one_rank_of_a_late_host_saves_only_the_gap_to_the_next_latest() {
    // 3 ranks; ranks 1 and 2 (one host) start late by a host gap before launching K (segments
    // 101, 102): g = 0, 50, 40. Each: call [0,1], K launched at 1+g, N at 4+g; K runs 100 from
    // 11+g; N arrives at 111+g: 111, 161, 151. T = 161, W = 50 + 0 + 10 = 60.
    // Fixing rank 1 alone: T = 151 (10 sooner), but rank 1 now waits 40 for rank 2: W = 40 + 40 + 0
    // = 80, 20 more GPU time spent waiting. Fixing the host (both): T = 111, W = 0.
    let mut job = JobData::default();
    for (r, g) in [(0, 0), (1, 50), (2, 40)] {
        call(&mut job, r, (0, 1), false);
        let (corr, call) = (job.call_rank.len() as i64, job.calls_of(r));
        job.call(r, 0, 1 + g, 3 + g, corr, false, 100 + r);
        job.op(r, 1, 11 + g, 111 + g, call, 0);
        let (_, n) = launch(&mut job, r, (4 + g, 6 + g), 1, (111 + g, 181), 0);
        job.member(0, n);
    }
    let g = build(&job);
    let b = base(&g);
    assert_eq!((b.transfer_start[0], b.total_wait), (161, 60));
    let one = replay(&g, &Change { gaps: vec![(101, 0)], ..Change::default() });
    assert_eq!(one.transfer_start[0], 151, "T moves only to the next-latest rank");
    assert_eq!(b.step_end[0] - one.step_end[0], 10);
    assert_eq!(b.total_wait - one.total_wait, -20);
    let host = replay(&g, &Change { gaps: vec![(101, 0), (102, 0)], ..Change::default() });
    assert_eq!((host.transfer_start[0], host.total_wait), (111, 0));
    assert!(g.replay(&Change { gaps: vec![(999, 0)], ..Change::default() }, &mut g.workspace(), &ReplayOptions::default()).is_err());
}

#[test]
fn a_host_gap_costs_only_while_the_gpu_starves() {
    // Both ranks: A launched at [0,2] (starts 10), then 200 ns of host work (segment 10 + rank)
    // before B's launch call [202, 204]. Rank 0's A runs 1000: B is queued behind it (starts
    // 1010) and the gap costs nothing. Rank 1's A runs 50: B starts at 202 + 10 = 212, ends 222;
    // without the gap it would start at A's end (60): it saves 212 - 60 = 152, not the whole 200.
    let mut job = JobData::default();
    for (r, a) in [(0, 1000), (1, 50)] {
        launch(&mut job, r, (0, 2), 1, (10, 10 + a), 0);
        let (corr, call) = (job.call_rank.len() as i64, job.calls_of(r));
        job.call(r, 0, 202, 204, corr, false, 10 + r);
        let b_start = (10 + a).max(212);
        job.op(r, 1, b_start, b_start + 10, call, 0);
    }
    let g = build(&job);
    let b = base(&g);
    assert_eq!(b.rank_end, [1020, 222]);
    let busy = replay(&g, &Change { gaps: vec![(10, 0)], ..Change::default() });
    assert_eq!(busy.rank_end, [1020, 222]);
    let starved = replay(&g, &Change { gaps: vec![(11, 0)], ..Change::default() });
    assert_eq!(starved.rank_end, [1020, 70]);
    // Halving it: 100 ns of host work, B launch-bound at 2 + 100 + 10 = 112.
    let half = replay(&g, &Change { gaps: vec![(11, 100)], ..Change::default() });
    assert_eq!(half.rank_end[1], 122);
}

#[test]
fn an_unrecorded_cross_stream_wait_is_inferred() {
    // Stream 1: A [10, 110]. Stream 2: B launched at 0 could start at 10 but starts at 111, 1 ns
    // after A ended: nothing recorded explains it, so B depends on A (inferred), slack 1.
    let mut job = JobData::default();
    let (_, a) = launch(&mut job, 0, (0, 2), 1, (10, 110), 0);
    let (_, b) = launch(&mut job, 0, (3, 5), 2, (111, 140), 0);
    let g = build(&job);
    let f = g.fidelity();
    assert_eq!((f.inferred_stream_waits, f.recorded_stream_waits), (1, 0));
    assert_eq!((f.explained_op_starts, f.start_error_max), (2, 1));
    let chain = g.binding_chain(g.node(NodeRef { kind: NodeKind::OpStart, row: b }).unwrap(), 10).unwrap();
    assert_eq!(chain[0].via, EdgeKind::CrossStreamInferred);
    assert_eq!(chain[0].slack, 1);
    assert_eq!(g.describe(chain[1].node), Some(NodeRef { kind: NodeKind::OpEnd, row: a }));
    let mut ws = g.workspace();
    g.replay(&Change { op_durations: vec![(a, 50)], ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
    let (start, end, _, _) = g.entity_times(ws.times());
    assert_eq!((start[b], end[b]), (61, 90));
    // Beyond the tolerance nothing is inferred: B keeps its time as slack.
    let mut far = job.clone();
    far.op_start[b] = 120;
    let g = build(&far);
    assert_eq!(g.fidelity().inferred_stream_waits, 0);
    assert_eq!(g.fidelity().explained_op_starts, 1);
}

#[test]
fn an_event_recorded_on_a_stream_without_ops_carries_that_streams_waits() {
    // FSDP: stream 2 (unshard) runs no op; it waits for event 1 (after A on stream 1), then event 2
    // is recorded on it, and stream 3 (the all-gather's) waits for event 2 before B. B depends on
    // A through stream 2, although it was launched (at 11) long before A ended (110): a host-bound
    // rank, whose B started at A's end only because of the waits. Shortening A moves B with it.
    let mut job = JobData::default();
    let (_, a) = launch(&mut job, 0, (0, 2), 1, (10, 110), 0);
    let (_, rec1) = call(&mut job, 0, (3, 4), false);
    job.event(0, 1, 1, rec1);
    let (_, wait1) = call(&mut job, 0, (5, 6), false);
    job.sync(0, SyncType::StreamWaitEvent, 2, 1, wait1, -1);
    let (_, rec2) = call(&mut job, 0, (7, 8), false);
    job.event(0, 2, 2, rec2);
    let (_, wait2) = call(&mut job, 0, (9, 10), false);
    job.sync(0, SyncType::StreamWaitEvent, 3, 2, wait2, -1);
    let (_, b) = launch(&mut job, 0, (11, 12), 3, (110, 150), 0);
    let g = build(&job);
    let f = g.fidelity();
    assert_eq!((f.recorded_stream_waits, f.inferred_stream_waits), (1, 0));
    let chain = g.binding_chain(g.node(NodeRef { kind: NodeKind::OpStart, row: b }).unwrap(), 10).unwrap();
    assert_eq!(chain[0].via, EdgeKind::CrossStream);
    let mut ws = g.workspace();
    g.replay(&Change { op_durations: vec![(a, 50)], ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
    let (start, end, _, _) = g.entity_times(ws.times());
    assert_eq!((start[b], end[b]), (60, 100));
}

/// A launched at [0,2] runs [10, 510]; a cudaStreamSynchronize [5, 515] waits for it; B is launched
/// at [520, 522] and runs [532, 542].
fn sync_job(record: bool) -> (JobData, usize, usize, usize) {
    let mut job = JobData::default();
    let (_, a) = launch(&mut job, 0, (0, 2), 1, (10, 510), 0);
    let (sync, corr) = call(&mut job, 0, (5, 515), true);
    if record {
        job.sync(0, SyncType::StreamSync, 1, -1, corr, -1);
    }
    let (_, b) = launch(&mut job, 0, (520, 522), 1, (532, 542), 0);
    (job, a, sync, b)
}

#[test]
fn a_blocking_sync_returns_when_the_gpu_work_it_waits_for_is_done() {
    // Return latency 515 - 510 = 5; minimum duration: the 5th percentile of the calls' durations, 2.
    // A shortened to 100: it ends 110, the sync returns 115, B's launch call starts 115 + 5 = 120
    // and B starts 130 (its launch latency is 10 here, 12 measured: slack 2), so B runs [132, 142].
    for record in [true, false] {
        let (job, a, sync, b) = sync_job(record);
        let g = build(&job);
        let f = g.fidelity();
        assert_eq!((f.recorded_syncs, f.inferred_syncs), if record { (1, 0) } else { (0, 1) });
        assert_eq!((f.return_latency_ns[0], f.blocking_min_duration_ns[0]), (5, 2));
        let mut ws = g.workspace();
        g.replay(&Change { op_durations: vec![(a, 100)], ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
        let (op_start, _, call_start, call_end) = g.entity_times(ws.times());
        assert_eq!((call_start[sync], call_end[sync]), (5, 115));
        assert_eq!(op_start[b], 132);
        // A sync whose work is already done takes its minimum duration.
        g.replay(&Change { op_durations: vec![(a, 0)], ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
        assert_eq!(g.entity_times(ws.times()).3[sync], 15, "max(5 + 2, 10 + 5)");
    }
}

#[test]
fn a_point_to_point_pair_waits_only_for_its_two_ranks() {
    // Ranks 0 and 1 exchange (instance 0); rank 2 runs a 1000 ns kernel but is not a member.
    // Arrivals at K's end: 110 and 140: T = 140, W = 30.
    let mut job = JobData::default();
    let mut k = vec![];
    for (r, d) in [(0, 100), (1, 130), (2, 1000)] {
        let (_, kr) = launch(&mut job, r, (0, 2), 1, (10, 10 + d), 0);
        k.push(kr);
        let (_, n) = launch(&mut job, r, (3, 5), 1, (10 + d, 10 + d + 40), 0);
        if r < 2 {
            job.member(0, n);
        }
    }
    // The pair's ends were measured as T + x: 180 for both (x = 40).
    job.op_end[3] = 180;
    job.op_end[1] = 180;
    let g = build(&job);
    let b = base(&g);
    assert_eq!((b.transfer_start[0], b.total_wait), (140, 30));
    let r2 = replay(&g, &Change { op_durations: vec![(k[2], 100)], ..Change::default() });
    assert_eq!((r2.transfer_start[0], r2.total_wait), (140, 30));
    let r1 = replay(&g, &Change { op_durations: vec![(k[1], 100)], ..Change::default() });
    assert_eq!((r1.transfer_start[0], r1.total_wait), (110, 0));
    // A faster transfer: rank 0's kernel ends 10 after T instead of 40.
    let x = replay(&g, &Change { transfers: vec![(0, 10)], ..Change::default() });
    assert_eq!(x.rank_end[0], 150);
}

#[test]
fn a_cuda_graph_launch_releases_many_ops() {
    // One call [0, 2] launches three kernels (one correlation id, so one launching call): each
    // starts at 10 or after its predecessor. Shortening the first moves the other two.
    let mut job = JobData::default();
    job.call(0, 0, 0, 2, 5, false, -1);
    let a = job.op(0, 1, 10, 30, 0, 0);
    job.op(0, 1, 30, 40, 0, 0);
    job.op(0, 1, 40, 45, 0, 0);
    let g = build(&job);
    assert_eq!(g.fidelity().explained_op_starts, 3);
    let r = replay(&g, &Change { op_durations: vec![(a, 5)], ..Change::default() });
    assert_eq!(r.rank_end, [30]);
}

#[test]
fn no_change_reproduces_every_simulated_time_exactly() {
    for (seed, jitter, record, threads) in [(1, false, true, 1), (2, true, true, 2), (3, true, false, 2), (4, false, false, 1)] {
        let spec = Spec { seed, jitter, record, threads, steps: 3, ranks: 3, ..Spec::default() };
        let s = synth::generate(&spec);
        let g = Graph::build(&s.job.view(), &Options::default()).unwrap();
        let mut ws = g.workspace();
        let outcome = g.replay(&Change::default(), &mut ws, &ReplayOptions::default()).unwrap();
        let (os, oe, cs, ce) = g.entity_times(ws.times());
        let j = &s.job;
        assert_eq!((os, oe, cs, ce), (j.op_start.clone(), j.op_end.clone(), j.call_start.clone(), j.call_end.clone()), "seed {seed}");
        let arrivals: Vec<i64> = j.member_op.iter().map(|&op| j.op_start[op as usize]).collect();
        assert_eq!(outcome.arrival, arrivals);
        assert!(outcome.total_wait > 0);
        assert_eq!(g.measured_times(), ws.times());
    }
}

#[test]
fn with_every_dependency_recorded_zero_slack_reproduces_the_trace() {
    // No jitter: every time follows from modelled dependencies, so the graph must explain every op
    // start and replaying with all slack removed must give the trace back (within the tolerance;
    // here exactly). It fails if any dependency is missed: that op's start would move earlier.
    let spec = Spec { steps: 3, ranks: 3, threads: 1, jitter: false, record: true, ..Spec::default() };
    let s = synth::generate(&spec);
    let opts = Options::default();
    let g = Graph::build(&s.job.view(), &opts).unwrap();
    let f = g.fidelity();
    assert_eq!(f.explained_start_share, 1.0, "{f:?}");
    assert_eq!((f.inferred_dependencies, f.unresolved_syncs, f.dropped_dependencies), (0, 0, 0));
    assert_eq!(f.anchored_op_starts, 0);
    let mut ws = g.workspace();
    g.replay(&Change { zero_all_slack: true, ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
    let (os, oe, _, ce) = g.entity_times(ws.times());
    for (got, want) in [(&os, &s.job.op_start), (&oe, &s.job.op_end), (&ce, &s.job.call_end)] {
        let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).max().unwrap();
        assert!(worst <= opts.tolerance_ns, "a time moved by {worst} ns");
    }
    // With jitter the same job keeps slack, and removing it only makes things earlier.
    let jittered = synth::generate(&Spec { jitter: true, ..spec });
    let g = Graph::build(&jittered.job.view(), &opts).unwrap();
    assert!(g.fidelity().slack_ns > 0);
    let mut ws = g.workspace();
    g.replay(&Change { zero_all_slack: true, ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
    assert!(ws.times().iter().zip(g.measured_times()).all(|(a, b)| a <= b));
}

#[test]
fn removing_a_planted_cause_gives_what_the_simulator_gives_without_it() {
    // The truth for blame is itself a what-if (docs/method.md section 6): the same job simulated
    // without the plant. Rank 1's 5th kernel of step 0 runs 300 us longer and rank 2's loader gap of
    // step 1 is 200 us longer. Replaying the planted job with both removed must give the
    // unplanted job's every time. (Nominal latencies as the simulator's: a replay can only be as
    // right as they are.)
    let spec = Spec { ranks: 3, steps: 3, threads: 1, jitter: false, record: true, call_ns: (2_000, 2_000), ..Spec::default() };
    let plants = vec![
        Plant::Kernel { rank: 1, step: 0, index: 5, extra_ns: 300_000 },
        Plant::Loader { rank: 2, step: 1, extra_ns: 200_000 },
    ];
    let planted = synth::generate(&Spec { plants, ..spec.clone() });
    let clean = synth::generate(&spec);
    assert_eq!((planted.planted_ops.len(), planted.planted_gaps.len()), (1, 1));
    let opts = Options { launch_latency_ns: Some(spec.launch_latency_ns), ..Options::default() };
    let g = Graph::build(&planted.job.view(), &opts).unwrap();
    let truth = Graph::build(&clean.job.view(), &opts).unwrap();
    let (op, extra) = planted.planted_ops[0];
    let (call, segment, gap_extra) = planted.planted_gaps[0];
    let j = &planted.job;
    let prev = (0..call).rev().find(|&k| j.call_rank[k] == j.call_rank[call]).unwrap(); // one thread per rank
    let gap = j.call_start[call] - j.call_end[prev];
    let change = Change {
        op_durations: vec![(op, planted.job.op_end[op] - planted.job.op_start[op] - extra)],
        gaps: vec![(segment, gap - gap_extra)],
        ..Change::default()
    };
    let mut ws = g.workspace();
    let fixed = g.replay(&change, &mut ws, &ReplayOptions::default()).unwrap();
    let want = base(&truth);
    assert_eq!(fixed, want);
    let (os, oe, cs, ce) = g.entity_times(ws.times());
    assert_eq!((os, oe, cs, ce), (clean.job.op_start, clean.job.op_end, clean.job.call_start, clean.job.call_end));
    let before = base(&g);
    assert!(before.total_wait > want.total_wait, "the plants cost wait: {} vs {}", before.total_wait, want.total_wait);
}

/// A random small job: random knobs, random seed.
fn random_spec(rng: &mut Rng) -> Spec {
    Spec {
        ranks: 1 + rng.below(4),
        steps: 1 + rng.below(3),
        ops_per_step: 5 + rng.below(40),
        collective_every: 1 + rng.below(12),
        p2p_every: rng.below(4),
        fsdp_every: rng.below(4),
        side_every: rng.below(9),
        graph_every: rng.below(9),
        sync_every: rng.below(20),
        threads: 1 + rng.below(2),
        jitter: rng.below(2) == 1,
        record: rng.below(3) != 0,
        seed: rng.next_u64(),
        ..Spec::default()
    }
}

#[test]
fn property_replay_reproduces_and_shortening_never_delays() {
    let mut rng = Rng::new(20260611);
    for case in 0..60 {
        let spec = random_spec(&mut rng);
        let s = synth::generate(&spec);
        let j = &s.job;
        let g = Graph::build(&j.view(), &Options::default()).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let mut ws = g.workspace();
        g.replay(&Change::default(), &mut ws, &ReplayOptions::default()).unwrap();
        let (os, oe, cs, ce) = g.entity_times(ws.times());
        assert!(os == j.op_start && oe == j.op_end && cs == j.call_start && ce == j.call_end, "case {case}: {spec:?}");
        let measured = ws.times().to_vec();

        // Random shortenings of every kind: no node may get later; lengthening: none earlier.
        let plain_ops: Vec<usize> = (0..j.op_start.len()).filter(|&o| !j.member_op.contains(&(o as i64))).collect();
        // Calls after another on their thread: their gap is host work a change can shorten.
        let gapped: Vec<usize> =
            (0..j.call_start.len()).filter(|&c| (0..c).any(|k| (j.call_rank[k], j.call_thread[k]) == (j.call_rank[c], j.call_thread[c]))).collect();
        for trial in 0..6 {
            let mut change = Change::default();
            let mut longer = Change::default();
            for _ in 0..1 + rng.below(4) {
                let op = plain_ops[rng.below(plain_ops.len())];
                let d = j.op_end[op] - j.op_start[op];
                change.op_durations.push((op, rng.range(0, d)));
                longer.op_durations.push((op, d + rng.range(0, 50_000)));
            }
            if !j.member_op.is_empty() {
                let m = rng.below(j.member_op.len());
                change.transfers.push((m, rng.range(0, 10_000)));
            }
            change.gaps.push((j.call_segment[gapped[rng.below(gapped.len())]], 0));
            change.call_durations.push((rng.below(j.call_start.len()), 0));
            change.zero_slack.push(rng.below(g.n_nodes() - 2) as u32 + 2);
            g.replay(&change, &mut ws, &ReplayOptions::default()).unwrap();
            let bad = ws.times().iter().zip(&measured).position(|(a, b)| a > b);
            assert!(bad.is_none(), "case {case} trial {trial}: node {bad:?} got later under {change:?}");
            g.replay(&longer, &mut ws, &ReplayOptions::default()).unwrap();
            assert!(ws.times().iter().zip(&measured).all(|(a, b)| a >= b), "case {case} trial {trial}: lengthening");
        }
    }
}

#[test]
fn replay_many_matches_one_by_one_and_chains_lead_back_to_the_cause() {
    let (job, k1) = ddp_job(150);
    let g = build(&job);
    let changes: Vec<Change> = (0..9).map(|d| Change { op_durations: vec![(k1, 100 + 10 * d)], ..Change::default() }).collect();
    let opts = ReplayOptions { chain_steps: 8 };
    let spare = Mutex::default();
    let many = g.replay_many(&changes, &opts, Some(2), &spare).unwrap();
    for (c, m) in changes.iter().zip(&many) {
        assert_eq!(*m, g.replay(c, &mut g.workspace(), &opts).unwrap());
    }
    // The workspaces (one per thread at most) are kept, and a second batch reuses them: the same outcomes.
    assert!((1..=2).contains(&spare.lock().unwrap().len()));
    assert_eq!(g.replay_many(&changes, &opts, Some(2), &spare).unwrap(), many);
    assert!((1..=2).contains(&spare.lock().unwrap().len()));
    // K1 = d on rank 1: W1 = d - 100; W2 = (70 + d) - max(40 + d, 170): d - 100 up to d = 130, then 30.
    assert_eq!(many.iter().map(|o| o.total_wait).collect::<Vec<_>>(), [0, 20, 40, 60, 70, 80, 90, 100, 110]);
    // Measured: instance 0's last arrival is rank 1's N1, bound by its wait for K1 (recorded).
    let b = g.replay(&Change::default(), &mut g.workspace(), &opts).unwrap();
    let chain = &b.chain_nodes[b.chain_offsets[0] as usize..b.chain_offsets[1] as usize];
    let described: Vec<NodeRef> = chain.iter().map(|&n| g.describe(n).unwrap()).collect();
    assert_eq!(described[0], NodeRef { kind: NodeKind::OpStart, row: job.member_op[2] as usize });
    assert_eq!(described[1], NodeRef { kind: NodeKind::OpEnd, row: k1 });
    assert_eq!(described[2], NodeRef { kind: NodeKind::OpStart, row: k1 });
    let links = g.binding_chain(chain[0], 8).unwrap();
    assert_eq!(links.iter().map(|l| l.node).collect::<Vec<_>>(), chain);
    assert_eq!((links[0].via, links[1].via, links[1].lag), (EdgeKind::CrossStream, EdgeKind::Duration, 150));
    // After the fix, instance 1's chain is re-derived on the replayed times.
    let mut ws = g.workspace();
    let fix = &changes[0];
    g.replay(fix, &mut ws, &opts).unwrap();
    let t = g.node(NodeRef { kind: NodeKind::OpStart, row: k1 }).unwrap();
    let after = g.binding_chain_after(&mut ws, fix, t + 1, 2).unwrap();
    assert_eq!((after[0].via, after[0].lag), (EdgeKind::Duration, 100));
}

#[test]
fn of_two_entries_for_one_op_the_later_wins() {
    // Every other op at its own duration (entries at many positions, in no order of theirs), and K1
    // on rank 1 twice: the replay is that of the later entry alone, in a batch too.
    let (job, k1) = ddp_job(150);
    let g = build(&job);
    let members: Vec<usize> = job.member_op.iter().map(|&m| m as usize).collect();
    let others: Vec<(usize, i64)> =
        (0..job.op_end.len()).rev().filter(|o| *o != k1 && !members.contains(o)).map(|o| (o, job.op_end[o] - job.op_start[o])).collect();
    for (first, later) in [(130, 100), (100, 130)] {
        let twice = Change { op_durations: [vec![(k1, first)], others.clone(), vec![(k1, later)]].concat(), ..Change::default() };
        let once = replay(&g, &Change { op_durations: vec![(k1, later)], ..Change::default() });
        assert_eq!(replay(&g, &twice), once);
        let many = g.replay_many(&[twice.clone(), Change::default()], &ReplayOptions::default(), Some(1), &Mutex::default()).unwrap();
        assert_eq!((&many[0], &many[1]), (&once, &base(&g)));
    }
    // One bad change fails the whole batch.
    let bad = Change { op_durations: vec![(999, 1)], ..Change::default() };
    assert!(g.replay_many(&[Change::default(), bad], &ReplayOptions::default(), Some(1), &Mutex::default()).is_err());
}

#[test]
fn bad_input_and_bad_changes_are_refused_with_a_reason() {
    let (job, k1) = ddp_job(150);
    let mut short = job.clone();
    short.op_end.pop();
    let err = |j: &JobData| match Graph::build(&j.view(), &options()) {
        Err(WhatIfError::Input(m)) => m,
        other => panic!("expected an input error, got {:?}", other.map(|_| ())),
    };
    assert!(err(&short).contains("ops: column end has"));
    let mut backwards = job.clone();
    backwards.op_end[0] = backwards.op_start[0] - 1;
    assert!(err(&backwards).contains("ops row 0: end"));
    let mut twice = job.clone();
    twice.member(1, twice.member_op[0] as usize);
    assert!(err(&twice).contains("member of two instances"));
    let mut gap = job.clone();
    gap.member_instance[0] = 5;
    assert!(err(&gap).contains("has no members"));
    // An op launched by a call its rank lacks (rows among the rank's calls, not the job's).
    let mut other_rank = job.clone();
    let last = other_rank.op_rank.len() - 1;
    other_rank.op_launch[last] = job.calls_of(job.op_rank[last]);
    assert!(err(&other_rank).contains(&format!("ops row {last}: launch {} out of range", other_rank.op_launch[last])));

    let g = build(&job);
    let mut ws = g.workspace();
    let refuse = |c: Change| g.replay(&c, &mut g.workspace(), &ReplayOptions::default()).unwrap_err().to_string();
    assert!(refuse(Change { op_durations: vec![(999, 1)], ..Change::default() }).contains("op row 999 out of range"));
    assert!(refuse(Change { op_durations: vec![(job.member_op[0] as usize, 1)], ..Change::default() }).contains("change its transfer"));
    assert!(refuse(Change { op_durations: vec![(k1, -1)], ..Change::default() }).contains("out of range"));
    assert!(refuse(Change { transfers: vec![(9, 1)], ..Change::default() }).contains("member row 9"));
    assert!(refuse(Change { zero_slack: vec![u32::MAX], ..Change::default() }).contains("node"));
    // A refused change leaves the workspace usable.
    assert_eq!(g.replay(&Change::default(), &mut ws, &ReplayOptions::default()).unwrap(), base(&g));
}

#[test]
fn contradictory_records_are_dropped_and_cycles_broken() {
    // A recorded wait says B (stream 2) waited for A (stream 1), but B started before A ended:
    // the record is dropped and counted, and the trace still replays exactly.
    let mut job = JobData::default();
    let (_, a) = launch(&mut job, 0, (0, 2), 1, (10, 110), 0);
    let (_, rec) = call(&mut job, 0, (3, 4), false);
    job.event(0, 1, 1, rec);
    let (_, wait) = call(&mut job, 0, (5, 6), false);
    job.sync(0, SyncType::StreamWaitEvent, 2, 1, wait, -1);
    let (_, b) = launch(&mut job, 0, (7, 8), 2, (50, 60), 0);
    let g = build(&job);
    assert_eq!(g.fidelity().unresolved_syncs, 1);
    let (os, _, _, _) = g.entity_times(g.measured_times());
    assert_eq!((os[a], os[b]), (10, 50));
    // A transfer measured to end before its last arrival (clock error): x < 0, the member end
    // unit depends on T that comes later in time; the order is repaired and the trace reproduced.
    let mut job = JobData::default();
    let (_, n0) = launch(&mut job, 0, (0, 2), 1, (10, 30), 0);
    let (_, n1) = launch(&mut job, 1, (0, 2), 1, (40, 60), 0);
    job.member(0, n0);
    job.member(0, n1);
    launch(&mut job, 0, (3, 4), 1, (30, 35), 0);
    let g = build(&job);
    assert_eq!(g.fidelity().transfer_violations, 1);
    let (os, oe, _, _) = g.entity_times(g.measured_times());
    assert_eq!((os, oe), (job.op_start.clone(), job.op_end.clone()));
}

#[test]
fn a_transfer_change_on_a_member_whose_transfer_edge_was_dropped_changes_nothing() {
    // Two collectives met in one order on rank 0 and the other on rank 1 (contradictory records):
    // the build breaks the cycle by dropping a member's transfer edge. A transfer change on that
    // member leaves its end alone (it panicked, reading past the units).
    let mut job = JobData::default();
    let (_, a0) = launch(&mut job, 0, (0, 2), 1, (46, 49), 0);
    let (_, b0) = launch(&mut job, 0, (0, 2), 1, (33, 33), 0);
    let (_, b1) = launch(&mut job, 1, (0, 2), 1, (34, 59), 0);
    let (_, a1) = launch(&mut job, 1, (0, 2), 1, (23, 75), 0);
    job.member(0, a0);
    job.member(0, a1);
    job.member(1, b0);
    job.member(1, b1);
    let g = build(&job);
    assert!(g.fidelity().dropped_dependencies > 0);
    // Every member's change replays; a transfer of 1000 ns ends every member later but the one
    // without a transfer edge.
    let unchanged = (0..4).filter(|&m| replay(&g, &Change { transfers: vec![(m, 1000)], ..Change::default() }) == base(&g)).count();
    assert_eq!(unchanged, 1);
}

#[test]
fn segments_named_by_their_call_rows_replay_as_any_other_naming() {
    // The graph keeps a bit per call where each gap's segment is its own call's row (as the
    // pipeline names them), a table otherwise: the same gap changes must replay the same.
    let mut rng = Rng::new(20261205);
    for case in 0..30 {
        let spec = random_spec(&mut rng);
        let mut rows = synth::generate(&spec).job;
        let named: Vec<usize> = (0..rows.call_segment.len()).filter(|_| rng.below(3) != 0).collect();
        rows.call_segment = vec![-1; rows.call_start.len()];
        for &c in &named {
            rows.call_segment[c] = c as i64;
        }
        let mut table = rows.clone();
        table.call_segment = rows.call_segment.iter().map(|&s| if s < 0 { -1 } else { s + 7 }).collect();
        let (gr, gt) = (Graph::build(&rows.view(), &Options::default()).unwrap(), Graph::build(&table.view(), &Options::default()).unwrap());
        assert!(gr.heap_bytes() < gt.heap_bytes() || named.is_empty(), "case {case}: the bits are smaller than the table");
        let (mut wr, mut wt) = (gr.workspace(), gt.workspace());
        for trial in 0..8 {
            let mut on_rows = Change::default();
            for _ in 0..1 + rng.below(3) {
                let c = rng.below(rows.call_start.len());
                on_rows.gaps.push((c as i64, rng.range(0, 20_000)));
            }
            let on_table = Change { gaps: on_rows.gaps.iter().map(|&(s, ns)| (s + 7, ns)).collect(), ..Change::default() };
            let opts = ReplayOptions { chain_steps: 4 };
            match (gr.replay(&on_rows, &mut wr, &opts), gt.replay(&on_table, &mut wt, &opts)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "case {case} trial {trial}");
                    assert_eq!(wr.times(), wt.times(), "case {case} trial {trial}");
                }
                (Err(_), Err(_)) => {} // a segment that names no host gap, on both
                (a, b) => panic!("case {case} trial {trial}: {a:?} against {b:?}"),
            }
        }
        // Segments named nowhere and negative ids: refused on both.
        for s in [-1, rows.call_start.len() as i64 + 100] {
            assert!(gr.replay(&Change { gaps: vec![(s, 0)], ..Change::default() }, &mut wr, &ReplayOptions::default()).is_err());
        }
    }
}
