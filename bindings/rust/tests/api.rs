//! The binding's API beyond the transcript (tests/bindings compares `ocr`'s output with the C++
//! API): pages handed over by a closure, the closure's errors and panics, checkpoints, errors.
//!
//!     UOCR_TEST_MODEL=MODEL_DIR UOCR_TEST_PAGES=a.png:b.png:c.png UOCR_LIB_DIR=BUILD/c_api \
//!         cargo test --offline --locked --test api -- --test-threads=1
use std::path::PathBuf;

use uocr::{cuda_graphs, status, stop, stop_reason_name, Backend, Checkpoint, Engine, EngineParams, Event, Model, Page, Precision, Reference, SessionParams, SlideKv};

fn model() -> Model {
    let dir = std::env::var_os("UOCR_TEST_MODEL").expect("set UOCR_TEST_MODEL to a model folder");
    Model::load(dir).expect("model loads")
}

fn pages() -> Vec<PathBuf> {
    let list = std::env::var_os("UOCR_TEST_PAGES").expect("set UOCR_TEST_PAGES to three page images (a:b:c)");
    let pages: Vec<PathBuf> = std::env::split_paths(&list).collect();
    assert_eq!(pages.len(), 3, "UOCR_TEST_PAGES needs three pages");
    pages
}

// A run's token ids, recorded from the events.
fn tokens(run: impl FnOnce(&mut dyn FnMut(&Event) -> bool) -> Result<uocr::RunSummary, uocr::Error>) -> Vec<i32> {
    let mut ids = Vec::new();
    run(&mut |e| {
        if let Event::Token { id, .. } = e {
            ids.push(*id);
        }
        true
    })
    .expect("run succeeds");
    ids
}

// Slides after 5 tokens without a "<PAGE>" marker, so a 3-page document needs page 2 mid-run.
fn sliding(max_new_tokens: i64) -> SessionParams {
    SessionParams { max_new_tokens, pages_per_group: 2, page_fallback_tokens: 5, ..Default::default() }
}

#[test]
fn pages_from_a_closure_match_pages_added_up_front() {
    let model = model();
    let pages = pages();
    let png = std::fs::read(&pages[2]).unwrap();
    let rgb: Vec<u8> = (0..3 * 64 * 48).map(|i| (7 * i % 251) as u8).collect();
    let mut s = model.session(&SessionParams { max_new_tokens: 6, ..Default::default() }).unwrap();
    s.add_image_file(&pages[0]).unwrap();
    s.add_image_rgb(&rgb, 64, 48, 0).unwrap();
    s.add_image_encoded(&png).unwrap();
    let up_front = tokens(|f| s.run(f));
    let mut asked = Vec::new();
    let handed = tokens(|f| {
        s.run_pages(
            3,
            |i| {
                asked.push(i);
                Ok(match i {
                    0 => Page::File(pages[0].clone()),
                    1 => Page::Rgb { data: rgb.as_slice().into(), width: 64, height: 48, stride: 0 },
                    _ => Page::Encoded(png.clone().into()),
                })
            },
            f,
        )
    });
    assert_eq!(handed.len(), 6);
    assert_eq!(handed, up_front);
    assert_eq!(asked, [0, 1, 2], "each page asked for once, in order");
    assert_eq!(s.page_count().unwrap(), 3, "run_pages leaves the added pages alone");
}

#[test]
fn a_page_source_error_ends_the_run_with_its_status_and_message() {
    let model = model();
    let pages = pages();
    let mut s = model.session(&sliding(24)).unwrap();
    let mut before = 0;
    let err = s
        .run_pages(
            3,
            |i| {
                if i == 2 {
                    return Err(uocr::Error::new(status::E_IO, "scanner jammed on page 2"));
                }
                Ok(Page::File(pages[i as usize].clone()))
            },
            |e| {
                before += matches!(e, Event::Token { .. }) as i32;
                true
            },
        )
        .unwrap_err();
    assert_eq!(err.status, status::E_IO);
    assert_eq!(err.message, "scanner jammed on page 2");
    assert_eq!(before, 5, "page 2 is asked for when the group slides, after 5 tokens");

    // io::Error converts (the `?` in a source); the session stays usable.
    let err = s.run_pages(3, |_| Ok(Page::Encoded(std::fs::read("/nonexistent/page.png")?.into())), |_| true).unwrap_err();
    assert_eq!(err.status, status::E_IO);
    let summary = s.run_pages(3, |i| Ok(Page::File(pages[i as usize].clone())), |_| true).unwrap();
    assert_eq!(summary.pages, 3);
    assert!(summary.peak_bytes >= summary.peak_kv_bytes && summary.peak_kv_bytes > 0);
    assert!(summary.scratch_bytes > 0 && summary.peak_scratch_bytes >= summary.scratch_bytes);
}

#[test]
fn a_page_source_panic_is_re_raised() {
    let model = model();
    let mut s = model.session(&sliding(8)).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.run_pages(2, |_| -> Result<Page, uocr::Error> { panic!("source panicked") }, |_| true);
    }));
    let payload = caught.expect_err("the panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"source panicked"));
}

#[test]
fn bad_pages_are_reported() {
    let model = model();
    let mut s = model.session(&sliding(8)).unwrap();
    let err = s.run_pages(2, |_| Ok(Page::Encoded((&b"not an image"[..]).into())), |_| true).unwrap_err();
    assert_eq!(err.status, status::E_INVALID_IMAGE);
    assert!(err.message.contains("cannot decode"), "{}", err.message);
    let short = Page::Rgb { data: vec![0u8; 10].into(), width: 4, height: 2, stride: 0 };
    let err = s.run_pages(2, |_| Ok(short.clone()), |_| true).unwrap_err();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("needs 24"), "{}", err.message);
    assert_eq!(s.run_pages(0, |_| Ok(short.clone()), |_| true).unwrap_err().status, status::E_INVALID_ARGUMENT);
    let err = model.session(&SessionParams { pages_per_group: 1, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("pages_per_group"), "{}", err.message);
}

#[test]
fn typed_options_reach_the_library() {
    let model = model();
    let pages = pages();
    let source = |i: i64| Ok(Page::File(pages[i as usize].clone()));
    let run = |params: SessionParams| tokens(|f| model.session(&params).unwrap().run_pages(3, source, f));
    let dense = run(sliding(24));
    // SR-SWA with full budgets is exactly dense attention; with one page and one block it is not.
    let all = Reference::Sparse { pages: -1, blocks: -1, block_tokens: 0 };
    assert_eq!(run(SessionParams { reference: all, ..sliding(24) }), dense);
    let narrow = Reference::Sparse { pages: 1, blocks: 1, block_tokens: 16 };
    assert_ne!(run(SessionParams { reference: narrow, ..sliding(24) }), dense);
    let err = model.session(&SessionParams { backend: Backend::Vulkan, device_index: 1000, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_UNSUPPORTED, "{}", err);
    // API 4 fields: a gate of fan-out 2 keeping one node per level runs; out-of-range values are refused.
    let gated = SessionParams { reference: narrow, reference_gate_fan_out: 2, reference_gate_beam: 1, ..sliding(24) };
    assert!(!run(gated).is_empty());
    let err = model.session(&SessionParams { reference_gate_fan_out: 1, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("reference_gate_fan_out"), "{}", err.message);
    let err = model.session(&SessionParams { max_batch: -1, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("max_batch"), "{}", err.message);
    // API 5: graphs off runs (the CPU ignores the field, so the tokens are dense's); out of range is refused.
    assert_eq!(SessionParams::default().cuda_graphs, cuda_graphs::DEFAULT);
    assert_eq!(run(SessionParams { cuda_graphs: cuda_graphs::OFF, ..sliding(24) }), dense);
    let err = model.session(&SessionParams { cuda_graphs: 3, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("cuda_graphs"), "{}", err.message);
    // API 7: the tiny model's folder has no uocr_decode.json, so ignoring it changes nothing.
    assert!(SessionParams::default().model_defaults);
    assert_eq!(run(SessionParams { model_defaults: false, ..sliding(24) }), dense);
    // API 8: slides that recompute the group run; reuse is the tiny model's (it names nothing).
    assert_eq!(SessionParams::default().slide_kv, SlideKv::ModelDefault);
    assert_eq!(run(SessionParams { slide_kv: SlideKv::Reuse, ..sliding(24) }), dense);
    assert!(!run(SessionParams { slide_kv: SlideKv::Recompute, ..sliding(24) }).is_empty());
    // API 9: the decode budget: a page over max_image_bytes is refused naming it; a negative scan limit is refused.
    assert_eq!((SessionParams::default().max_image_bytes, SessionParams::default().max_jpeg_scans), (0, 0));
    let mut s = model.session(&SessionParams { max_image_bytes: 1000, ..Default::default() }).unwrap();
    let err = s.add_image_file(&pages[0]).unwrap_err();
    assert_eq!(err.status, status::E_INVALID_IMAGE);
    assert!(err.message.contains("max_image_bytes"), "{}", err.message);
    let err = model.session(&SessionParams { max_jpeg_scans: -1, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("max_jpeg_scans"), "{}", err.message);
    // API 10: a time budget per page spent before the page is ready stops the run before its first token.
    assert_eq!(SessionParams::default().page_time_budget_seconds, 0.0);
    let err = model.session(&SessionParams { page_time_budget_seconds: -1.0, ..Default::default() }).err().unwrap();
    assert!(err.message.contains("page_time_budget_seconds"), "{}", err.message);
    let mut s = model
        .session(&SessionParams { max_new_tokens: 8, page_time_budget_seconds: 1e-9, ..Default::default() })
        .unwrap();
    s.add_image_file(&pages[0]).unwrap();
    let summary = s.run(|_| true).unwrap();
    assert_eq!((summary.stop_reason, summary.generated_tokens), (stop::TIME_BUDGET, 0));
    assert_eq!(stop_reason_name(summary.stop_reason), "time_budget");
    // API 11/12: f32 by default, bf16 on request (f32 where the CPU has no bf16 dot products);
    // the summary says which ran.
    assert_eq!(SessionParams::default().precision, Precision::F32);
    let mut s = model.session(&SessionParams { max_new_tokens: 2, precision: Precision::Bf16, ..Default::default() }).unwrap();
    s.add_image_file(&pages[0]).unwrap();
    let ran = s.run(|_| true).unwrap().precision;
    assert!(ran == Precision::Bf16 as i32 || ran == Precision::F32 as i32, "{}", ran);
    let mut s = model.session(&SessionParams { max_new_tokens: 2, precision: Precision::F32, ..Default::default() }).unwrap();
    s.add_image_file(&pages[0]).unwrap();
    assert_eq!(s.run(|_| true).unwrap().precision, Precision::F32 as i32);
}

#[test]
fn sessions_on_an_engine_read_as_sessions_on_the_model() {
    let model = model();
    let pages = pages();
    let err = Engine::open(&model, &EngineParams { backend: Backend::Vulkan, max_batch: 2, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_UNSUPPORTED, "{}", err);
    let err = Engine::open(&model, &EngineParams { max_batch: -2, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT, "{}", err);
    let engine = Engine::open(&model, &EngineParams { max_batch: 2, ..Default::default() }).unwrap();
    let info = engine.info().unwrap();
    assert_eq!((info.backend, info.device_index, info.precision), (Backend::Cpu, 0, Precision::F32));
    assert!(!info.device.is_empty() && info.driver.is_empty(), "{:?}", info);
    let err = engine.session(&SessionParams { max_batch: 3, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("its engine runs"), "{}", err.message);
    let params = SessionParams { max_new_tokens: 6, ..Default::default() };
    let text = |mut s: uocr::Session| {
        s.add_image_file(&pages[0]).unwrap();
        s.run(|_| true).unwrap();
        s.text().unwrap()
    };
    let on_engine = engine.session(&params).unwrap();
    drop(engine);  // the session keeps what it runs on
    let a = text(on_engine);
    assert!(!a.is_empty());
    assert_eq!(a, text(model.session(&params).unwrap()));
}

#[test]
fn a_cancelled_run_resumes_from_its_checkpoint() {
    let model = model();
    let pages = pages();
    let source = |i: i64| Ok(Page::File(pages[i as usize].clone()));
    let full = tokens(|f| model.session(&sliding(24)).unwrap().run_pages(3, source, f));
    assert_eq!(full.len(), 24);

    let path = std::env::temp_dir().join(format!("uocr_rust_api_{}.ckpt", std::process::id()));
    let with_checkpoint =
        |resume| SessionParams { checkpoint: Some(Checkpoint { path: path.clone(), every_tokens: 4, resume }), ..sliding(24) };
    let mut seen = Vec::new();
    let err = model
        .session(&with_checkpoint(false))
        .unwrap()
        .run_pages(3, source, |e| {
            if let Event::Token { id, .. } = e {
                seen.push(*id);
            }
            seen.len() < 14
        })
        .unwrap_err();
    assert_eq!(err.status, status::E_CANCELLED);
    assert_eq!(err.summary.unwrap().generated_tokens, 14);
    assert_eq!(seen, full[..14]);
    // The last checkpoint is at token 12: the resumed run sends exactly the rest.
    let rest = tokens(|f| model.session(&with_checkpoint(true)).unwrap().run_pages(3, source, f));
    assert_eq!(rest, full[12..]);
    let other = SessionParams { pages_per_group: 3, ..with_checkpoint(true) };
    let err = model.session(&other).unwrap().run_pages(3, source, |_| true).unwrap_err();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("other parameters"), "{}", err.message);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn page_drafts_leave_the_transcript_as_it_is() {
    let model = model();
    let pages = pages();
    assert!(SessionParams::default().draft);
    assert_eq!(SessionParams::default().draft_max_tokens, 0);
    let err = model.session(&SessionParams { draft_max_tokens: 300, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);
    assert!(err.message.contains("draft_max_tokens"), "{}", err.message);
    // Without drafts: a pass per token fed back (the last is not, when max_new_tokens stops the run).
    let mut s = model.session(&SessionParams { max_new_tokens: 12, draft: false, ..Default::default() }).unwrap();
    s.add_image_file(&pages[0]).unwrap();
    let plain = s.run(|_| true).unwrap();
    let text = s.text().unwrap();
    assert_eq!((plain.decode_passes, plain.drafted_tokens), (plain.generated_tokens - 1, 0));
    // The run's own text as the page's draft: the same transcript, the passes counted.
    let mut s = model.session(&SessionParams { max_new_tokens: 12, ..Default::default() }).unwrap();
    s.add_image_file(&pages[0]).unwrap();
    s.set_page_draft(0, &text).unwrap();
    let drafted = s.run(|_| true).unwrap();
    assert_eq!(s.text().unwrap(), text);
    assert!(drafted.accepted_tokens <= drafted.drafted_tokens, "{:?}", drafted);
    assert!(drafted.decode_passes <= drafted.generated_tokens, "{:?}", drafted);
    let err = s.set_page_draft(1, b"x").unwrap_err();
    assert_eq!(err.status, status::E_INVALID_ARGUMENT);

    // A document whose pages come with drafts reads as one without; a draft source's error ends the run with it.
    let source = |i: i64| Ok(Page::File(pages[i as usize].clone()));
    let plain = tokens(|f| model.session(&SessionParams { draft: false, ..sliding(24) }).unwrap().run_pages(3, source, f));
    let mut s = model.session(&sliding(24)).unwrap();
    let drafted = tokens(|f| s.run_pages_with_drafts(3, source, |_| Ok(Some(text.clone())), f));
    assert_eq!(drafted, plain);
    let no_layer = |i: i64| if i == 1 { Err(uocr::Error::new(status::E_IO, "page 1 has no text layer")) } else { Ok(None) };
    let err = s.run_pages_with_drafts(3, source, no_layer, |_| true).unwrap_err();
    assert_eq!((err.status, err.message.as_str()), (status::E_IO, "page 1 has no text layer"));
}
