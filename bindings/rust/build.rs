// Links libuocr: from $UOCR_LIB_DIR when set (and records it as an rpath so this crate's tests
// run from the build tree), else from `pkg-config --libs-only-L uocr`, else the system library
// path. The folders found are passed on to the build scripts of crates that depend on this one
// as DEP_UOCR_LIB_DIR (a PATH-style list; empty for the system path): an rpath set here reaches
// only this crate's own tests, so a program adds its own (samples/rust/build.rs).
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=UOCR_LIB_DIR");
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(dir) = env::var("UOCR_LIB_DIR") {
        if !dir.is_empty() {
            dirs.push(dir);
        }
    } else if let Ok(out) = Command::new("pkg-config").args(["--libs-only-L", "uocr"]).output() {
        if out.status.success() {
            for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(d) = flag.strip_prefix("-L") {
                    dirs.push(d.to_string());
                }
            }
        }
    }
    for d in &dirs {
        println!("cargo:rustc-link-search=native={}", d);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d);
    }
    println!("cargo:rustc-link-lib=dylib=uocr");
    match env::join_paths(&dirs) {
        Ok(joined) => println!("cargo:lib_dir={}", joined.to_string_lossy()),
        Err(_) => println!("cargo:warning=a libuocr folder holds ':'; dependents get no DEP_UOCR_LIB_DIR"),
    }
}
