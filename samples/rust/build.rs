// Records the folder the uocr crate linked libuocr from (DEP_UOCR_LIB_DIR, from
// bindings/rust/build.rs) as an rpath, so target/debug/ocr runs from the build tree without
// LD_LIBRARY_PATH. Nothing to do for a libuocr on the system library path.
fn main() {
    if let Some(dirs) = std::env::var_os("DEP_UOCR_LIB_DIR") {
        for d in std::env::split_paths(&dirs) {
            if !d.as_os_str().is_empty() {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d.display());
            }
        }
    }
}
