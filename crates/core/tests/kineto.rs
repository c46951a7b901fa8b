//! The Kineto reader on the real 2-rank PyTorch profiler traces beside the checkout
//! (`../shared/data/real/kineto/hta-trace_filter-2rank/`, from HTA's test data). Expected counts
//! were taken with Python's gzip + json (events by `cat`). Ignored, saying why, when absent.

use collectivetrace_core::{read_kineto, read_kineto_traces};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/real/kineto/hta-trace_filter-2rank");
    (0..2).map(|r| dir.join(format!("sampled_rank-{r}.json.gz"))).collect()
}

#[test]
#[cfg_attr(not(real_data), ignore = "real Kineto traces not found at ../shared/data/real/kineto")]
fn real_two_rank_traces_parse_with_their_counts() {
    let paths = traces();
    // rank: (kernels, NCCL kernels, runtime calls, memcpy, memset, user_annotation ranges, host pid)
    let expected = [(1154, 10, 1204, 40, 10, 73, 4037), (1104, 10, 1154, 40, 10, 65, 4045)];
    for (rank, (path, want)) in paths.iter().zip(expected).enumerate() {
        let e = read_kineto(path).unwrap_or_else(|err| panic!("{err}"));
        let kernels = e.table("kernels");
        let nccl = kernels.column("short_name").unwrap().iter().filter(|&&id| e.strings[id as usize].starts_with("nccl")).count();
        let got = (
            kernels.len(),
            nccl,
            e.table("runtime").len(),
            e.table("memcpy").len(),
            e.table("memset").len(),
            e.table("nvtx").len(),
            kernels.column("pid").unwrap()[0],
        );
        assert_eq!(got, want, "rank {rank}");
        assert!(kernels.column("pid").unwrap().iter().all(|&p| p == want.6));
        assert!(kernels.column("device").unwrap().iter().all(|&d| d == rank as i64), "device = rank on this job");
        let meta: HashMap<_, _> = e.metadata.iter().cloned().collect();
        assert_eq!(meta["distributedInfo.rank"], rank.to_string());
        assert_eq!(meta["distributedInfo.world_size"], "128");
        // No base in these (2023-04) traces: ts is absolute µs; the first kernel is at 2023-04-28 23:51 UTC.
        assert_eq!(e.session.utc_epoch_ns, None);
        assert!(e.session.time_normalized);
        let start = kernels.column("start").unwrap();
        assert!(start.windows(2).all(|w| w[0] <= w[1]), "sorted by start");
        assert_eq!(start[0], [1_682_725_898_082_228_000, 1_682_725_898_082_381_000][rank]);
        // Every kernel's launch is in the same process under the same correlation id.
        let launched: std::collections::HashSet<i64> = e.table("runtime").column("correlation").unwrap().iter().copied().collect();
        assert!(kernels.column("correlation").unwrap().iter().all(|c| launched.contains(c)));
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    }
}

#[test]
#[cfg_attr(not(real_data), ignore = "real Kineto traces not found at ../shared/data/real/kineto")]
fn real_traces_in_parallel_equal_one_by_one() {
    let paths = traces();
    for (path, together) in paths.iter().zip(read_kineto_traces(&paths, Some(2)).unwrap()) {
        let (together, alone) = (together.unwrap(), read_kineto(path).unwrap());
        assert_eq!(together.strings, alone.strings);
        for (a, b) in together.tables.iter().zip(&alone.tables) {
            assert_eq!(a.columns, b.columns, "{}", a.name);
        }
    }
}
