//! Builds the CPU stand-in CUDA stack (shims/) into real shared libraries with NVIDIA's sonames
//! and symbol versions, and the C example workload linked against them by soname.
//!
//! Layout, under `$OUT_DIR/stand-in` and copied to `target/<profile>/stand-in`:
//!   lib/      libcudart.so.12, libcublas.so.12, libcublasLt.so.12 (+ unversioned links for `-lcudart ...`)
//!   driver/   libcuda.so.1, apart so a test can leave the driver out
//!   include/  the stand-in headers
//!   bin/      example programs
//!   vendored/ libcublas-5e3a1f0c.so.12: the stand-in cuBLAS renamed as auditwheel renames the
//!             libraries it bundles into a wheel (file and soname; symbol versions kept)
//! The folder reaches the code as `env!("CUBLASGUARD_STANDIN_DIR")`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct SharedLib {
    source: &'static str,
    soname: &'static str,
    folder: &'static str,
    dev_link: &'static str,
    links: &'static [&'static str],
    /// More C sources linked into the same library.
    extra: &'static [&'static str],
}

const LIBRARIES: &[SharedLib] = &[
    SharedLib { source: "cuda", soname: "libcuda.so.1", folder: "driver", dev_link: "libcuda.so", links: &["-ldl"], extra: &[] },
    SharedLib { source: "cudart", soname: "libcudart.so.12", folder: "lib", dev_link: "libcudart.so", links: &["-ldl", "-lpthread"], extra: &[] },
    SharedLib { source: "cublas", soname: "libcublas.so.12", folder: "lib", dev_link: "libcublas.so", links: &["-lcudart", "-lpthread", "-lm"], extra: &["cublas_blas"] },
    SharedLib { source: "cublasLt", soname: "libcublasLt.so.12", folder: "lib", dev_link: "libcublasLt.so", links: &["-lcudart", "-lpthread", "-lm"], extra: &[] },
];

const EXAMPLES: &[&str] = &["mlp"];

fn run(mut cmd: Command) {
    let shown = format!("{cmd:?}");
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    assert!(status.success(), "failed: {shown}");
}

fn replace_link(target: &str, link: &Path) {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create stand-in copy");
    for entry in fs::read_dir(from).expect("read stand-in dir") {
        let entry = entry.expect("dir entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_symlink() {
            replace_link(fs::read_link(&src).expect("read link").to_str().expect("utf-8 link"), &dst);
        } else {
            let _ = fs::remove_file(&dst);
            fs::copy(&src, &dst).expect("copy stand-in file");
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let root = out.join("stand-in");
    let shims = manifest.join("shims");
    for dir in ["lib", "driver", "bin", "vendored"] {
        fs::create_dir_all(root.join(dir)).expect("create stand-in dirs");
    }
    let compiler = cc::Build::new().opt_level(2).get_compiler();

    for lib in LIBRARIES {
        let dir = root.join(lib.folder);
        let mut cmd = compiler.to_command();
        cmd.args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(dir.join(lib.soname))
            .arg(shims.join(format!("{}.c", lib.source)))
            .args(lib.extra.iter().map(|e| shims.join(format!("{e}.c"))))
            .arg(format!("-Wl,-soname,{}", lib.soname))
            .arg(format!("-Wl,--version-script={}", shims.join(format!("{}.map", lib.source)).display()))
            .arg(format!("-L{}", root.join("lib").display()))
            .args(lib.links);
        run(cmd);
        replace_link(lib.soname, &dir.join(lib.dev_link));
        println!("cargo:rerun-if-changed=shims/{}.c", lib.source);
        println!("cargo:rerun-if-changed=shims/{}.map", lib.source);
        for e in lib.extra {
            println!("cargo:rerun-if-changed=shims/{e}.c");
        }
    }
    {
        let vendored = "libcublas-5e3a1f0c.so.12";
        let mut cmd = compiler.to_command();
        cmd.args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(root.join("vendored").join(vendored))
            .arg(shims.join("cublas.c"))
            .arg(shims.join("cublas_blas.c"))
            .arg(format!("-Wl,-soname,{vendored}"))
            .arg(format!("-Wl,--version-script={}", shims.join("cublas.map").display()))
            .arg(format!("-L{}", root.join("lib").display()))
            .args(["-lcudart", "-lpthread", "-lm"]);
        run(cmd);
    }
    println!("cargo:rerun-if-changed=shims/elements.h");
    copy_tree(&shims.join("include"), &root.join("include"));
    println!("cargo:rerun-if-changed=shims/include");

    for example in EXAMPLES {
        let mut cmd = compiler.to_command();
        // -g: a fault's native frames then name the example's own source lines.
        cmd.args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(root.join("bin").join(example))
            .arg(manifest.join("examples").join(format!("{example}.c")))
            .arg(format!("-I{}", root.join("include").display()))
            .arg(format!("-L{}", root.join("lib").display()))
            .args(["-lcublas", "-lcudart", "-lm"]);
        run(cmd);
        println!("cargo:rerun-if-changed=examples/{example}.c");
    }

    // target/<profile>/build/<pkg>-<hash>/out → target/<profile>/stand-in, a path people can type.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        copy_tree(&root, &profile_dir.join("stand-in"));
    }
    println!("cargo:rustc-env=CUBLASGUARD_STANDIN_DIR={}", root.display());
    println!("cargo:rerun-if-changed=build.rs");
}
