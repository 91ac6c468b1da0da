//! ocr: transcribes a document of page images through the uocr C ABI.
//!
//!     ocr [-n MAX_NEW_TOKENS] [-q] [--pages-per-group G] [--page-fallback-tokens N] MODEL_DIR IMAGE...
//!
//! A crate of its own over the binding crate `uocr` (bindings/rust, a path dependency). Build and
//! run (from samples/rust, with libuocr.so built in BUILD/c_api):
//!
//!     UOCR_LIB_DIR=/abs/path/to/BUILD/c_api cargo build --offline --locked
//!     target/debug/ocr MODEL_DIR page1.png page2.png
//!
//! The pages are handed over one at a time (`Session::run_pages`), when the session needs them,
//! so a document of any length runs with `G` pages in memory. Prints the transcript and a newline
//! on stdout (the library's exact bytes); the token stream and a summary go to stderr unless -q.
use std::io::Write;
use std::process::exit;

fn usage() -> ! {
    eprintln!("usage: ocr [-n MAX_NEW_TOKENS] [-q] [--pages-per-group G] [--page-fallback-tokens N] MODEL_DIR IMAGE...");
    exit(2)
}

fn number<T: std::str::FromStr>(flag: &str, value: Option<&String>) -> T {
    value.and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        eprintln!("ocr: {} needs a number", flag);
        usage()
    })
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut params = uocr::SessionParams::default();
    let mut quiet = false;
    while !args.is_empty() && args[0].starts_with('-') {
        let flag = args[0].clone();
        match flag.as_str() {
            "-q" => {
                quiet = true;
                args.remove(0);
                continue;
            }
            "-n" => params.max_new_tokens = number(&flag, args.get(1)),
            "--pages-per-group" => params.pages_per_group = number(&flag, args.get(1)),
            "--page-fallback-tokens" => params.page_fallback_tokens = number(&flag, args.get(1)),
            _ => usage(),
        }
        args.drain(..2);
    }
    if args.len() < 2 {
        usage();
    }
    if let Err(e) = run(&args[0], &args[1..], &params, quiet) {
        eprintln!("ocr: {}", e);
        exit(1);
    }
}

fn run(model_dir: &str, images: &[String], params: &uocr::SessionParams, quiet: bool) -> Result<(), uocr::Error> {
    let model = uocr::Model::load(model_dir)?;
    let mut session = model.session(params)?;
    drop(model); // the session keeps the model alive
    let mut tokens = 0i64;
    let mut err = std::io::stderr();
    let summary = session.run_pages(
        images.len() as i64,
        |index| Ok(uocr::Page::File(images[index as usize].clone().into())),
        |e| {
            match e {
                uocr::Event::Token { text, .. } => {
                    tokens += 1;
                    if !quiet {
                        let _ = err.write_all(text);
                    }
                }
                uocr::Event::Block { page, label, box_px, .. } if !quiet => {
                    let _ = writeln!(err, "\n[page {} block {}: {:?} px]", page, label, box_px);
                }
                _ => {}
            }
            true // false would cancel
        },
    )?;
    if tokens != summary.generated_tokens {
        eprintln!("ocr: {} token events but {} generated tokens", tokens, summary.generated_tokens);
        exit(1);
    }
    let mut text = session.text()?;
    text.push(b'\n');
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if out.write_all(&text).and_then(|_| out.flush()).is_err() {
        eprintln!("ocr: cannot write the transcript");
        exit(1);
    }
    if !quiet {
        eprintln!(
            "\n{} pages, {} generated tokens (stop: {}), vision {:.2} s, decode {:.2} s, peak memory {} bytes",
            summary.pages,
            summary.generated_tokens,
            uocr::stop_reason_name(summary.stop_reason),
            summary.vision_seconds,
            summary.decode_seconds,
            summary.peak_bytes
        );
    }
    Ok(())
}
