//! Synthetic jobs for tests and benches: a simulated data-parallel training job, timed by its own
//! rules (not by the graph), written out as the columns a trace reader would give.
//!
//! Each rank runs the same program: per step a data-loader gap, then compute kernels launched one
//! by one (some as CUDA graphs of 4), side-stream copies fenced by events both ways, a collective
//! on the NCCL stream after every `collective_every` kernels (queued behind the compute that
//! produced its bucket through an event, DDP-style; optionally the compute stream waits for one,
//! FSDP-style; some are 2-rank point-to-point pairs), blocking syncs mid-step (event sync, stream
//! sync, synchronous memcpy) and a stream or device sync at the end of the step.
//!
//! The truth: a call starts `gap` after the previous call on its thread ended (or after the other
//! thread's last call, at a thread switch); an op starts at the latest of its stream predecessor's
//! end (+ a queue gap), its launch call's start + the launch latency (+ jitter), and the ops its
//! stream was made to wait for; a blocking call returns at the latest of its start + its minimum
//! duration and the waited ops' end + the return latency (+ jitter); a collective's transfer starts
//! at the last member's arrival and each member ends its own transfer time later. Without jitter
//! every one of those relations is one the graph models, so a graph built from the trace must
//! explain every time; with jitter it must still reproduce the trace, with slack.
//!
//! *Plants* add time to chosen kernels, loader gaps or transfers without changing a single random
//! draw, so the same spec without them is the truth of the what-if "remove the plant".

use super::input::{JobData, SyncType};

/// A small, fast, seeded generator (splitmix64), so tests need no extra crate.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Extra time planted into the simulated job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The `index`-th kernel launch of `step` on `rank` runs `extra_ns` longer.
    Kernel { rank: usize, step: usize, index: usize, extra_ns: i64 },
    /// The data-loader gap of `step` on `rank` is `extra_ns` longer.
    Loader { rank: usize, step: usize, extra_ns: i64 },
}

/// What to simulate. `Spec::default()` is a small 2-rank job; `Spec::bench()` the 1M-op one.
#[derive(Clone, Debug)]
pub struct Spec {
    pub ranks: usize,
    pub steps: usize,
    /// Compute launches per step and rank.
    pub ops_per_step: usize,
    /// A collective after every this many launches (>= 1).
    pub collective_every: usize,
    /// Every this-th collective is a point-to-point pair of ranks (k, k + 1); 0: never.
    pub p2p_every: usize,
    /// The compute stream waits for every this-th collective (FSDP); 0: never.
    pub fsdp_every: usize,
    /// A side-stream copy fenced by events both ways every this many launches; 0: never.
    pub side_every: usize,
    /// A CUDA graph launch (4 kernels, one call) every this many launches; 0: never.
    pub graph_every: usize,
    /// A blocking sync mid-step every this many launches; 0: never.
    pub sync_every: usize,
    /// Host threads per rank: 1, or 2 (the second half of each step on a second thread).
    pub threads: usize,
    pub kernel_ns: (i64, i64),
    pub gap_ns: (i64, i64),
    pub call_ns: (i64, i64),
    pub loader_ns: (i64, i64),
    pub transfer_ns: (i64, i64),
    pub launch_latency_ns: i64,
    pub return_latency_ns: i64,
    pub sync_min_ns: i64,
    /// Launch, queue and return jitter (slack the graph cannot explain).
    pub jitter: bool,
    /// Write sync and event records (else the graph must infer those dependencies).
    pub record: bool,
    pub seed: u64,
    pub plants: Vec<Plant>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            ranks: 2,
            steps: 2,
            ops_per_step: 40,
            collective_every: 10,
            p2p_every: 3,
            fsdp_every: 2,
            side_every: 7,
            graph_every: 9,
            sync_every: 16,
            threads: 2,
            kernel_ns: (2_000, 60_000),
            gap_ns: (1_000, 8_000),
            call_ns: (2_000, 5_000),
            loader_ns: (50_000, 400_000),
            transfer_ns: (20_000, 60_000),
            launch_latency_ns: 4_000,
            return_latency_ns: 3_000,
            sync_min_ns: 2_000,
            jitter: false,
            record: true,
            seed: 1,
            plants: Vec::new(),
        }
    }
}

impl Spec {
    /// The bench's job: 8 ranks x ~125k GPU ops (1M in all, with ~1M launch calls), collectives
    /// every ~600 ops, side streams, CUDA graphs, syncs, jitter.
    pub fn bench() -> Spec {
        Spec {
            ranks: 8,
            steps: 20,
            ops_per_step: 6_240,
            collective_every: 560,
            p2p_every: 0,
            fsdp_every: 4,
            side_every: 50,
            graph_every: 100,
            sync_every: 2_000,
            threads: 2,
            jitter: true,
            record: true,
            seed: 7,
            ..Spec::default()
        }
    }
}

/// A simulated job and where its plants went.
#[derive(Clone, Debug, Default)]
pub struct Synth {
    pub job: JobData,
    /// (op row, extra ns) of each planted kernel.
    pub planted_ops: Vec<(usize, i64)>,
    /// (call row, segment, extra ns) of each planted loader gap: the gap before that call.
    pub planted_gaps: Vec<(usize, i64, i64)>,
}

const COMPUTE: usize = 0;
const SIDE: usize = 1;
const NCCL: usize = 2;
/// Stream ids as a trace would number them (not dense, not in order).
const STREAM_ID: [i64; 3] = [7, 13, 3];

struct RankSim {
    rank: i64,
    host_end: [i64; 2],
    thread: usize,
    stream_end: [i64; 3],
    /// Per stream: the latest end of the ops it was made to wait for (applies to its next op).
    pending: [i64; 3],
    /// Per event id: the end of the work it recorded.
    event_done: Vec<i64>,
    /// The next call's correlation id: ids count the rank's calls from 1, so a call's row among
    /// them (what its ops name it by) is its id - 1.
    next_corr: i64,
    /// Added to the next call's gap (the data loader), of which `plant_gap` planted.
    extra_gap: i64,
    plant_gap: i64,
    /// (call row, extra ns) of the planted gaps.
    planted: Vec<(usize, i64)>,
}

/// Per-rank random draws of one action, made for every rank whether it takes part or not, so
/// the random sequence depends on the program only.
struct Draws {
    gap: i64,
    call: i64,
    launch_jitter: i64,
    queue_gap: i64,
    return_jitter: i64,
}

impl RankSim {
    fn call(&mut self, job: &mut JobData, thread: usize, d: &Draws, blocking: bool) -> (usize, i64, i64) {
        let ready = if thread != self.thread { self.host_end[thread].max(self.host_end[self.thread]) } else { self.host_end[thread] };
        self.thread = thread;
        let gap = d.gap + std::mem::take(&mut self.extra_gap);
        let start = ready + gap;
        let corr = self.next_corr;
        self.next_corr += 1;
        let row = job.call(self.rank, 100 + thread as i64, start, start + d.call, corr, blocking, job.call_rank.len() as i64);
        if self.plant_gap > 0 {
            self.planted.push((row, std::mem::take(&mut self.plant_gap)));
        }
        self.host_end[thread] = start + d.call;
        (row, start, corr)
    }

    /// When an event recorded on `stream` now completes: after the stream's work so far, and after
    /// the waits made on it since its last op (CUDA: a record captures the stream's waits too).
    fn recorded(&self, stream: usize) -> i64 {
        self.stream_end[stream].max(self.pending[stream])
    }

    /// An op launched at `launch` (its call's start) by the call of id `corr`; returns (row, start). `end` None: a member,
    /// whose end the collective sets.
    #[allow(clippy::too_many_arguments)]
    fn op(&mut self, job: &mut JobData, spec: &Spec, stream: usize, launch: i64, corr: i64, dur: Option<i64>, step: usize, d: &Draws) -> (usize, i64) {
        let start = (self.stream_end[stream] + d.queue_gap)
            .max(launch + spec.launch_latency_ns + d.launch_jitter)
            .max(std::mem::replace(&mut self.pending[stream], i64::MIN));
        let end = start + dur.unwrap_or(0);
        self.stream_end[stream] = end;
        (job.op(self.rank, STREAM_ID[stream], start, end, corr - 1, step as i64), start)
    }

    /// A blocking call started at `start` returning when `done` (the waited work) is done.
    fn returns(&mut self, job: &mut JobData, spec: &Spec, row: usize, start: i64, done: i64, d: &Draws) {
        let end = (start + spec.sync_min_ns).max(done.saturating_add(spec.return_latency_ns + d.return_jitter));
        job.call_end[row] = end;
        self.host_end[self.thread] = end;
    }
}

/// Simulates a job; deterministic for a spec.
pub fn generate(spec: &Spec) -> Synth {
    let mut rng = Rng::new(spec.seed);
    let mut out = Synth::default();
    let job = &mut out.job;
    let n = spec.ranks;
    let mut sims: Vec<RankSim> = (0..n)
        .map(|r| RankSim {
            rank: r as i64,
            host_end: [1_000_000; 2],
            thread: 0,
            stream_end: [0; 3],
            pending: [i64::MIN; 3],
            event_done: vec![i64::MIN; 8],
            next_corr: 1,
            extra_gap: 0,
            plant_gap: 0,
            planted: Vec::new(),
        })
        .collect();
    let draw = |rng: &mut Rng| -> Vec<Draws> {
        (0..n)
            .map(|_| Draws {
                gap: rng.range(spec.gap_ns.0, spec.gap_ns.1),
                call: rng.range(spec.call_ns.0, spec.call_ns.1),
                launch_jitter: if spec.jitter { rng.range(0, 3_000) } else { 0 },
                queue_gap: if spec.jitter { rng.range(0, 1_500) } else { 0 },
                return_jitter: if spec.jitter { rng.range(0, 2_000) } else { 0 },
            })
            .collect()
    };
    let mut event_id = 0i64;
    let mut next_event = || {
        event_id = (event_id + 1) % 8;
        event_id
    };
    let mut instance = 0i64;
    let mut collectives = 0usize;
    let all: Vec<usize> = (0..n).collect();

    for step in 0..spec.steps {
        for (r, sim) in sims.iter_mut().enumerate() {
            let planted: i64 = spec
                .plants
                .iter()
                .map(|p| match *p {
                    Plant::Loader { rank, step: s, extra_ns } if rank == r && s == step => extra_ns,
                    _ => 0,
                })
                .sum();
            sim.extra_gap = rng.range(spec.loader_ns.0, spec.loader_ns.1) + planted;
            sim.plant_gap = planted;
        }
        for i in 0..spec.ops_per_step {
            let thread = if spec.threads > 1 && i >= spec.ops_per_step / 2 { 1 } else { 0 };
            let is_side = spec.side_every > 0 && i % spec.side_every == spec.side_every - 1;
            let is_graph = !is_side && spec.graph_every > 0 && i % spec.graph_every == spec.graph_every - 1;
            let durations: Vec<i64> = (0..n).map(|_| rng.range(spec.kernel_ns.0, spec.kernel_ns.1)).collect();
            if is_side {
                // compute -> side copy -> compute, fenced by events both ways.
                let (e1, e2) = (next_event(), next_event());
                let ds: Vec<Vec<Draws>> = (0..5).map(|_| draw(&mut rng)).collect();
                for (r, sim) in sims.iter_mut().enumerate() {
                    let (_, _, corr) = sim.call(job, thread, &ds[0][r], false);
                    sim.event_done[e1 as usize] = sim.recorded(COMPUTE);
                    if spec.record {
                        job.event(r as i64, STREAM_ID[COMPUTE], e1, corr);
                    }
                    let (_, _, corr) = sim.call(job, thread, &ds[1][r], false);
                    sim.pending[SIDE] = sim.pending[SIDE].max(sim.event_done[e1 as usize]);
                    if spec.record {
                        job.sync(r as i64, SyncType::StreamWaitEvent, STREAM_ID[SIDE], e1, corr, -1);
                    }
                    let (_, start, corr) = sim.call(job, thread, &ds[2][r], false);
                    sim.op(job, spec, SIDE, start, corr, Some(durations[r] / 2), step, &ds[2][r]);
                    let (_, _, corr) = sim.call(job, thread, &ds[3][r], false);
                    sim.event_done[e2 as usize] = sim.recorded(SIDE);
                    if spec.record {
                        job.event(r as i64, STREAM_ID[SIDE], e2, corr);
                    }
                    let (_, _, corr) = sim.call(job, thread, &ds[4][r], false);
                    sim.pending[COMPUTE] = sim.pending[COMPUTE].max(sim.event_done[e2 as usize]);
                    if spec.record {
                        job.sync(r as i64, SyncType::StreamWaitEvent, STREAM_ID[COMPUTE], e2, corr, -1);
                    }
                }
            } else {
                let d = draw(&mut rng);
                let kernels = if is_graph { 4 } else { 1 };
                for (r, sim) in sims.iter_mut().enumerate() {
                    let extra: i64 = spec
                        .plants
                        .iter()
                        .map(|p| match *p {
                            Plant::Kernel { rank, step: s, index, extra_ns } if rank == r && s == step && index == i => extra_ns,
                            _ => 0,
                        })
                        .sum();
                    let (_, start, corr) = sim.call(job, thread, &d[r], false);
                    for k in 0..kernels {
                        let dur = if k == 0 { durations[r] + extra } else { durations[r] / 4 + 500 * k as i64 };
                        let (op, _) = sim.op(job, spec, COMPUTE, start, corr, Some(dur), step, &d[r]);
                        if k == 0 && extra > 0 {
                            out.planted_ops.push((op, extra));
                        }
                    }
                }
            }

            if spec.sync_every > 0 && i % spec.sync_every == spec.sync_every / 2 {
                // A blocking sync mid-step, kind in rotation: event sync, synchronous memcpy, stream sync.
                let kind = (i / spec.sync_every + step) % 3;
                let e = next_event();
                let (d1, d2) = (draw(&mut rng), draw(&mut rng));
                let copy: Vec<i64> = (0..n).map(|_| rng.range(1_000, 5_000)).collect();
                for (r, sim) in sims.iter_mut().enumerate() {
                    match kind {
                        0 => {
                            let (_, _, corr) = sim.call(job, thread, &d1[r], false);
                            sim.event_done[e as usize] = sim.recorded(COMPUTE);
                            if spec.record {
                                job.event(r as i64, STREAM_ID[COMPUTE], e, corr);
                            }
                            let (row, start, corr) = sim.call(job, thread, &d2[r], true);
                            sim.returns(job, spec, row, start, sim.event_done[e as usize], &d2[r]);
                            if spec.record {
                                job.sync(r as i64, SyncType::EventSync, -1, e, corr, -1);
                            }
                        }
                        1 => {
                            let (row, start, corr) = sim.call(job, thread, &d2[r], true);
                            sim.op(job, spec, COMPUTE, start, corr, Some(copy[r]), step, &d2[r]);
                            sim.returns(job, spec, row, start, sim.stream_end[COMPUTE], &d2[r]);
                        }
                        _ => {
                            let (row, start, corr) = sim.call(job, thread, &d2[r], true);
                            sim.returns(job, spec, row, start, sim.stream_end[COMPUTE], &d2[r]);
                            if spec.record {
                                job.sync(r as i64, SyncType::StreamSync, STREAM_ID[COMPUTE], -1, corr, -1);
                            }
                        }
                    }
                }
            }

            if i % spec.collective_every.max(1) == spec.collective_every.max(1) - 1 {
                let members: Vec<usize> = if spec.p2p_every > 0 && collectives % spec.p2p_every == spec.p2p_every - 1 && n > 1 {
                    vec![collectives % n, (collectives + 1) % n]
                } else {
                    all.clone()
                };
                let fsdp = spec.fsdp_every > 0 && collectives % spec.fsdp_every == spec.fsdp_every - 1;
                collectives += 1;
                let (e1, e2) = (next_event(), next_event());
                let ds: Vec<Vec<Draws>> = (0..5).map(|_| draw(&mut rng)).collect();
                let x: Vec<i64> = (0..n).map(|_| rng.range(spec.transfer_ns.0, spec.transfer_ns.1)).collect();
                let mut arrivals = Vec::new();
                for &r in &members {
                    let sim = &mut sims[r];
                    // The bucket is ready when the compute so far is done: record, wait, launch.
                    let (_, _, corr) = sim.call(job, thread, &ds[0][r], false);
                    sim.event_done[e1 as usize] = sim.recorded(COMPUTE);
                    if spec.record {
                        job.event(r as i64, STREAM_ID[COMPUTE], e1, corr);
                    }
                    let (_, _, corr) = sim.call(job, thread, &ds[1][r], false);
                    sim.pending[NCCL] = sim.pending[NCCL].max(sim.event_done[e1 as usize]);
                    if spec.record {
                        job.sync(r as i64, SyncType::StreamWaitEvent, STREAM_ID[NCCL], e1, corr, -1);
                    }
                    let (_, start, corr) = sim.call(job, thread, &ds[2][r], false);
                    let (op, arrival) = sim.op(job, spec, NCCL, start, corr, None, step, &ds[2][r]);
                    job.member(instance, op);
                    arrivals.push((r, op, arrival));
                }
                let t = arrivals.iter().map(|a| a.2).max().unwrap();
                for &(r, op, _) in &arrivals {
                    job.op_end[op] = t + x[r];
                    sims[r].stream_end[NCCL] = t + x[r];
                }
                instance += 1;
                if fsdp {
                    for &r in &members {
                        let sim = &mut sims[r];
                        let (_, _, corr) = sim.call(job, thread, &ds[3][r], false);
                        sim.event_done[e2 as usize] = sim.recorded(NCCL);
                        if spec.record {
                            job.event(r as i64, STREAM_ID[NCCL], e2, corr);
                        }
                        let (_, _, corr) = sim.call(job, thread, &ds[4][r], false);
                        sim.pending[COMPUTE] = sim.pending[COMPUTE].max(sim.event_done[e2 as usize]);
                        if spec.record {
                            job.sync(r as i64, SyncType::StreamWaitEvent, STREAM_ID[COMPUTE], e2, corr, -1);
                        }
                    }
                }
            }
        }
        // End of step: the host waits for the NCCL stream (even steps) or the whole device (odd).
        let d = draw(&mut rng);
        for (r, sim) in sims.iter_mut().enumerate() {
            let (row, start, corr) = sim.call(job, 0, &d[r], true);
            if step % 2 == 0 {
                sim.returns(job, spec, row, start, sim.stream_end[NCCL], &d[r]);
                if spec.record {
                    job.sync(r as i64, SyncType::StreamSync, STREAM_ID[NCCL], -1, corr, -1);
                }
            } else {
                let done = sim.stream_end.iter().copied().max().unwrap();
                sim.returns(job, spec, row, start, done, &d[r]);
                if spec.record {
                    job.sync(r as i64, SyncType::DeviceSync, -1, -1, corr, -1);
                }
            }
        }
    }
    for sim in &sims {
        out.planted_gaps.extend(sim.planted.iter().map(|&(row, extra)| (row, out.job.call_segment[row], extra)));
    }
    out
}
