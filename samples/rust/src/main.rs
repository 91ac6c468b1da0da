//! ocr: transcribes page images through the uocr C ABI.
//!
//!     ocr [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...
//!
//! Prints the transcript and a newline on stdout (the library's exact bytes); the token stream
//! and a summary go to stderr unless -q.
use std::io::Write;
use std::process::exit;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut params = uocr::SessionParams::default();
    let mut quiet = false;
    while !args.is_empty() && args[0].starts_with('-') {
        match args[0].as_str() {
            "-n" if args.len() > 1 => {
                params.max_new_tokens = args[1].parse().unwrap_or_else(|_| {
                    eprintln!("ocr: -n needs a number");
                    exit(2)
                });
                args.drain(..2);
            }
            "-q" => {
                quiet = true;
                args.remove(0);
            }
            _ => break,
        }
    }
    if args.len() < 2 {
        eprintln!("usage: ocr [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...");
        exit(2);
    }
    match run(&args[0], &args[1..], &params, quiet) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("ocr: {}", e);
            exit(1);
        }
    }
}

fn run(model_dir: &str, images: &[String], params: &uocr::SessionParams, quiet: bool) -> Result<(), uocr::Error> {
    let model = uocr::Model::load(model_dir)?;
    let mut session = model.session(params)?;
    drop(model); // the session keeps the model alive
    for image in images {
        session.add_image_file(image)?;
    }
    let mut tokens = 0i64;
    let mut err = std::io::stderr();
    let summary = session.run(|e| {
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
        true
    })?;
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
            "\n{} pages, {} generated tokens (stop: {}), vision {:.2} s, decode {:.2} s",
            summary.pages,
            summary.generated_tokens,
            uocr::stop_reason_name(summary.stop_reason),
            summary.vision_seconds,
            summary.decode_seconds
        );
    }
    Ok(())
}
