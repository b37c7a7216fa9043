//! The runner crate is what a runner for other hardware compiles against: it must not pull in
//! the CPU kernels, the model or the engine.

#[test]
fn the_runner_crate_depends_on_no_kernel_model_or_engine() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("read Cargo.toml");
    let deps: Vec<&str> = manifest
        .split("\n[")
        .filter(|section| section.starts_with("dependencies]"))
        .flat_map(|section| section.lines().skip(1))
        .filter_map(|line| line.split(['=', '.']).next())
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    assert_eq!(deps, ["thiserror"], "the runner crate's dependencies");
}
