//! Tells the tests whether the real exports beside the checkout (`../shared/data/real`) are
//! there: without them those tests are reported as ignored, with the reason, not passed.

fn main() {
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/real");
    println!("cargo::rustc-check-cfg=cfg(real_data)");
    println!("cargo::rerun-if-changed={}", real.display());
    if real.join("FACTS.tsv").is_file() {
        println!("cargo::rustc-cfg=real_data");
    }
}
