//! Says whether the guard is built with frame pointers (`.cargo/config.toml` asks for them):
//! with them a hook keeps its caller's return addresses at the call (`ffi::host::call_site`),
//! without them (a `RUSTFLAGS` of one's own replaces the config's) it keeps none.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cublasguard_frame_pointers)");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    // "-C force-frame-pointers=yes" as two flags or one ("-Cforce-frame-pointers=yes"); the last
    // one given wins, as with rustc.
    let mut on = false;
    for (i, flag) in flags.iter().enumerate() {
        let codegen = match flag.strip_prefix("-C") {
            Some("") => flags.get(i + 1).copied().unwrap_or(""),
            Some(rest) => rest,
            None if *flag == "--codegen" => flags.get(i + 1).copied().unwrap_or(""),
            None => continue,
        };
        if let Some(value) = codegen.strip_prefix("force-frame-pointers") {
            on = matches!(value, "" | "=yes" | "=y" | "=on" | "=true" | "=always");
        }
    }
    if on {
        println!("cargo:rustc-cfg=cublasguard_frame_pointers");
    }
}
