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
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real/kineto (it lives beside the checkout, never in it)")]
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
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real/kineto (it lives beside the checkout, never in it)")]
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

/// Every real trace beside the checkout: the 8 DLRM ranks and the 2 HTA ranks.
fn all_real_traces() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/real/kineto");
    let mut paths: Vec<PathBuf> = ["param-dlrm-8rank", "hta-trace_filter-2rank"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap().map(|e| e.unwrap().path()))
        .collect();
    paths.sort();
    paths
}

/// Complete ("X") events of a trace by category, counted with serde_json.
fn categories(path: &Path) -> HashMap<String, usize> {
    let bytes = std::fs::read(path).unwrap();
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out).unwrap();
        out
    } else {
        String::from_utf8(bytes).unwrap()
    };
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut count = HashMap::new();
    for e in doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X") {
        *count.entry(e["cat"].as_str().unwrap_or("").to_string()).or_default() += 1;
    }
    count
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real/kineto (it lives beside the checkout, never in it)")]
fn real_traces_give_every_cpu_op_and_runtime_call() {
    let paths = all_real_traces();
    assert_eq!(paths.len(), 10);
    for (path, export) in paths.iter().zip(read_kineto_traces(&paths, Some(2)).unwrap()) {
        let export = export.unwrap_or_else(|e| panic!("{e}"));
        let count = categories(path);
        let n = |cat: &str| count.get(cat).copied().unwrap_or(0);
        assert_eq!(export.table("cpu_ops").len(), n("cpu_op"), "{}", path.display());
        assert_eq!(export.table("runtime").len(), n("cuda_runtime") + n("cuda_driver"), "{}", path.display());
        assert_eq!(export.table("sync").len(), n("cuda_sync"));
        assert!(export.warnings.is_empty(), "{:?}", export.warnings);
        let domain = export.table("cpu_ops").column("domain_name").unwrap();
        assert!(domain.iter().all(|&d| export.strings[d as usize] == "cpu_op"));
    }
    // Seen with Python's json: cpu_op events of worker 0 and of HTA's rank 0.
    let count = |name: &str| read_kineto(paths.iter().find(|p| p.ends_with(name)).unwrap()).unwrap().table("cpu_ops").len();
    assert_eq!((count("worker0_step_12.1694128201545.pt.trace.json"), count("sampled_rank-0.json.gz")), (1633, 2329));
}
