//! Safe Rust wrapper over the uocr C ABI (`c_api/uocr.h`, `libuocr.so`).
//!
//! ```no_run
//! let model = uocr::Model::load("models/tiny").unwrap();
//! let mut params = uocr::SessionParams::default();
//! params.max_new_tokens = 512;
//! let mut session = model.session(&params).unwrap();
//! session.add_image_file("page.png").unwrap();
//! let summary = session
//!     .run(|e| {
//!         if let uocr::Event::Token { text, .. } = e {
//!             eprint!("{}", String::from_utf8_lossy(text));
//!         }
//!         true // keep going; false cancels
//!     })
//!     .unwrap();
//! println!("{}", String::from_utf8_lossy(&session.text().unwrap()));
//! # let _ = summary;
//! ```
//!
//! `Model` is `Send + Sync` (the library's model is immutable); `Session` is `Send` but not
//! `Sync` (one thread at a time). Both free their handle on drop, in any order.

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

/// UOCR_API_VERSION of the header this binding mirrors.
pub const API_VERSION: i32 = 2;

pub mod status {
    pub const OK: i32 = 0;
    pub const E_INVALID_ARGUMENT: i32 = -1;
    pub const E_IO: i32 = -2;
    pub const E_INVALID_MODEL: i32 = -3;
    pub const E_INVALID_IMAGE: i32 = -4;
    pub const E_UNSUPPORTED: i32 = -5;
    pub const E_OUT_OF_MEMORY: i32 = -6;
    pub const E_TOKENIZER: i32 = -7;
    pub const E_CANCELLED: i32 = -8;
    pub const E_INTERNAL: i32 = -9;
    pub const E_INVALID_HANDLE: i32 = -100;
    pub const E_VERSION_MISMATCH: i32 = -101;
    pub const E_BUSY: i32 = -102;
    pub const E_BUFFER_TOO_SMALL: i32 = -103;
}

pub const IMAGE_MODE_BASE: i32 = 0;
pub const IMAGE_MODE_GUNDAM: i32 = 1;

const EVENT_TOKEN: i32 = 1;
const EVENT_PAGE: i32 = 2;
const EVENT_BLOCK: i32 = 3;

pub mod stop {
    pub const EOS: i32 = 0;
    pub const MAX_TOKENS: i32 = 1;
    pub const CONTEXT_LIMIT: i32 = 2;
    pub const LOOP: i32 = 3;
    pub const CANCELLED: i32 = 4;
    pub const NO_TOKEN: i32 = 5;
}

// ---- raw ABI ------------------------------------------------------------------------------

#[repr(C)]
struct RawModel {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawSession {
    _opaque: [u8; 0],
}

#[repr(C)]
struct ModelParams {
    struct_size: u32,
    api_version: u32,
    flags: u32,
    reserved0: u32,
}

/// `uocr_session_params`; `Default` is the library's `uocr_session_params_init`.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct SessionParams {
    struct_size: u32,
    pub image_mode: i32,
    pub max_new_tokens: i64,
    prompt: *const c_char, // set through Session creation from `prompt_text`
    pub window: i32,
    pub temperature: f32,
    pub top_p: f32,
    pub ngram_size: i32,
    pub seed: u64,
    pub ngram_window: i32,
    pub loop_guard: i32,
    pub max_image_pixels: u64,
    // API version 2: 0 is the default for each (see uocr.h).
    pub backend: i32,
    pub device_index: i32,
    pub pages_per_group: i32,
    pub overlap_pages: i32,
    pub page_fallback_tokens: i32,
    pub reference_mode: i32,
    pub reference_pages: i32,
    pub reference_blocks: i32,
    pub reference_block_tokens: i32,
    pub positions: i32,
    checkpoint_path: *const c_char, // not exposed by this sample binding (NULL: no checkpoints)
    pub checkpoint_every_tokens: i32,
    pub resume: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ModelInfo {
    struct_size: u32,
    pub hidden_size: i32,
    pub layers: i32,
    pub vocab_size: i32,
    pub sliding_window: i32,
    pub image_size: i32,
    pub max_positions: i32,
    pub bos_id: i32,
    pub eos_id: i32,
    pub image_token_id: i32,
}

#[repr(C)]
struct RawEvent {
    struct_size: u32,
    kind: i32,
    token_id: i32,
    page: i32,
    text: *const c_char,
    text_len: usize,
    label: *const c_char,
    box_: [i32; 4],
    box_px: [i32; 4],
}

/// `uocr_run_summary`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunSummary {
    struct_size: u32,
    pub stop_reason: i32,
    pub empty: i32,
    reserved0: i32,
    pub pages: i64,
    pub visual_tokens: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub vision_seconds: f64,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub reference_kv_bytes: u64,
    pub window_kv_bytes: u64,
    pub kv_allocated_bytes: u64,
    pub peak_kv_bytes: u64,
    pub text_len: u64,
}

// The layouts this binding assumes (64-bit targets), checked at compile time.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<ModelParams>() == 16);
    assert!(std::mem::size_of::<SessionParams>() == 120);
    assert!(std::mem::size_of::<ModelInfo>() == 40);
    assert!(std::mem::size_of::<RawEvent>() == 72);
    assert!(std::mem::size_of::<RunSummary>() == 112);
};

type Callback = extern "C" fn(*const RawEvent, *mut c_void) -> i32;

#[link(name = "uocr")]
extern "C" {
    fn uocr_version_string() -> *const c_char;
    fn uocr_api_version() -> i32;
    fn uocr_status_string(status: i32) -> *const c_char;
    fn uocr_stop_reason_string(stop: i32) -> *const c_char;
    fn uocr_last_error() -> *const c_char;
    fn uocr_model_params_init(p: *mut ModelParams);
    fn uocr_model_load(dir: *const c_char, p: *const ModelParams, out: *mut *mut RawModel) -> i32;
    fn uocr_model_free(m: *mut RawModel);
    fn uocr_model_info_init(i: *mut ModelInfo);
    fn uocr_model_get_info(m: *const RawModel, i: *mut ModelInfo) -> i32;
    fn uocr_session_params_init(p: *mut SessionParams);
    fn uocr_session_create(m: *const RawModel, p: *const SessionParams, out: *mut *mut RawSession) -> i32;
    fn uocr_session_free(s: *mut RawSession);
    fn uocr_session_last_error(s: *const RawSession) -> *const c_char;
    fn uocr_session_add_image_file(s: *mut RawSession, path: *const c_char) -> i32;
    fn uocr_session_add_image_encoded(s: *mut RawSession, data: *const c_void, size: usize) -> i32;
    fn uocr_session_add_image_rgb(s: *mut RawSession, rgb: *const u8, w: i32, h: i32, stride: usize) -> i32;
    fn uocr_session_clear_pages(s: *mut RawSession) -> i32;
    fn uocr_session_page_count(s: *const RawSession, out: *mut i32) -> i32;
    fn uocr_run_summary_init(s: *mut RunSummary);
    fn uocr_session_run(s: *mut RawSession, cb: Option<Callback>, user: *mut c_void, sum: *mut RunSummary) -> i32;
    fn uocr_session_text(s: *const RawSession, buf: *mut c_char, cap: usize, out_len: *mut usize) -> i32;
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

// ---- safe API ------------------------------------------------------------------------------

/// A failed call: the status code and the library's message.
#[derive(Clone, Debug)]
pub struct Error {
    pub status: i32,
    pub message: String,
    /// For `E_CANCELLED` from `Session::run`: the partial run's summary.
    pub summary: Option<RunSummary>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, status_name(self.status))
    }
}

impl std::error::Error for Error {}

pub fn status_name(status: i32) -> String {
    cstr(unsafe { uocr_status_string(status) })
}

pub fn stop_reason_name(stop: i32) -> String {
    cstr(unsafe { uocr_stop_reason_string(stop) })
}

/// The library's "MAJOR.MINOR.PATCH".
pub fn version() -> String {
    cstr(unsafe { uocr_version_string() })
}

fn thread_error(status: i32) -> Error {
    Error { status, message: cstr(unsafe { uocr_last_error() }), summary: None }
}

fn check_library() -> Result<(), Error> {
    let v = unsafe { uocr_api_version() };
    if v < API_VERSION {
        return Err(Error {
            status: status::E_VERSION_MISMATCH,
            message: format!("libuocr {} implements API version {}, this binding needs {}", version(), v, API_VERSION),
            summary: None,
        });
    }
    Ok(())
}

fn path_cstring(path: &Path) -> Result<CString, Error> {
    let s = path.to_str().ok_or_else(|| Error {
        status: status::E_INVALID_ARGUMENT,
        message: format!("path {:?} is not UTF-8", path),
        summary: None,
    })?;
    CString::new(s).map_err(|_| Error {
        status: status::E_INVALID_ARGUMENT,
        message: "path contains a NUL byte".into(),
        summary: None,
    })
}

/// A loaded model folder. Immutable: share it across threads freely.
pub struct Model {
    h: *mut RawModel,
}

unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Model {
    pub fn load<P: AsRef<Path>>(dir: P) -> Result<Model, Error> {
        check_library()?;
        let dir = path_cstring(dir.as_ref())?;
        let mut p = ModelParams { struct_size: 0, api_version: 0, flags: 0, reserved0: 0 };
        let mut h: *mut RawModel = std::ptr::null_mut();
        let st = unsafe {
            uocr_model_params_init(&mut p);
            uocr_model_load(dir.as_ptr(), &p, &mut h)
        };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Model { h })
    }

    pub fn info(&self) -> Result<ModelInfo, Error> {
        let mut info = std::mem::MaybeUninit::<ModelInfo>::zeroed();
        let st = unsafe {
            uocr_model_info_init(info.as_mut_ptr());
            uocr_model_get_info(self.h, info.as_mut_ptr())
        };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(unsafe { info.assume_init() })
    }

    /// A new session; `prompt` (None: upstream's) must contain one "<image>".
    pub fn session_with_prompt(&self, params: &SessionParams, prompt: Option<&str>) -> Result<Session, Error> {
        let prompt = match prompt {
            Some(p) => Some(CString::new(p).map_err(|_| Error {
                status: status::E_INVALID_ARGUMENT,
                message: "prompt contains a NUL byte".into(),
                summary: None,
            })?),
            None => None,
        };
        let mut p = params.clone();
        p.struct_size = std::mem::size_of::<SessionParams>() as u32;
        p.prompt = prompt.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mut h: *mut RawSession = std::ptr::null_mut();
        let st = unsafe { uocr_session_create(self.h, &p, &mut h) };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Session { h, _not_sync: PhantomData })
    }

    pub fn session(&self, params: &SessionParams) -> Result<Session, Error> {
        self.session_with_prompt(params, None)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { uocr_model_free(self.h) }
    }
}

impl Default for SessionParams {
    fn default() -> Self {
        let mut p = std::mem::MaybeUninit::<SessionParams>::zeroed();
        unsafe {
            uocr_session_params_init(p.as_mut_ptr());
            p.assume_init()
        }
    }
}

/// A streamed event; borrowed data lives for the callback only.
#[derive(Debug)]
pub enum Event<'a> {
    /// One generated token and the exact UTF-8 bytes it completes (may be empty).
    Token { id: i32, text: &'a [u8] },
    /// The model began page `page`.
    Page { page: i32 },
    /// A layout block: label and box (0..999 model coordinates, and page pixels).
    Block { page: i32, label: &'a str, box_: [i32; 4], box_px: [i32; 4] },
}

/// Pages plus one transcription at a time; `Send`, not `Sync`.
pub struct Session {
    h: *mut RawSession,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

unsafe impl Send for Session {}

struct RunState<'f> {
    f: &'f mut dyn FnMut(&Event) -> bool,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

extern "C" fn trampoline(e: *const RawEvent, user: *mut c_void) -> i32 {
    let state = unsafe { &mut *(user as *mut RunState) };
    if state.panic.is_some() {
        return 1;
    }
    let e = unsafe { &*e };
    let event = match e.kind {
        EVENT_TOKEN => Event::Token {
            id: e.token_id,
            text: if e.text_len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(e.text as *const u8, e.text_len) } },
        },
        EVENT_PAGE => Event::Page { page: e.page },
        EVENT_BLOCK => Event::Block {
            page: e.page,
            label: unsafe { CStr::from_ptr(e.label) }.to_str().unwrap_or(""),
            box_: e.box_,
            box_px: e.box_px,
        },
        _ => return 0, // a kind added after this binding: skip it
    };
    // A panic must not unwind into C: catch it, cancel the run, re-raise after it returns.
    match panic::catch_unwind(AssertUnwindSafe(|| (state.f)(&event))) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(p) => {
            state.panic = Some(p);
            1
        }
    }
}

impl Session {
    fn err(&self, st: i32) -> Error {
        Error { status: st, message: cstr(unsafe { uocr_session_last_error(self.h) }), summary: None }
    }

    fn check(&self, st: i32) -> Result<(), Error> {
        if st == status::OK {
            Ok(())
        } else {
            Err(self.err(st))
        }
    }

    pub fn add_image_file<P: AsRef<Path>>(&mut self, path: P) -> Result<(), Error> {
        let p = path_cstring(path.as_ref())?;
        self.check(unsafe { uocr_session_add_image_file(self.h, p.as_ptr()) })
    }

    /// PNG/JPEG/... bytes (copied).
    pub fn add_image_encoded(&mut self, data: &[u8]) -> Result<(), Error> {
        self.check(unsafe { uocr_session_add_image_encoded(self.h, data.as_ptr() as *const c_void, data.len()) })
    }

    /// Interleaved RGB rows, `stride` bytes apart (0: 3 * width). Copied.
    pub fn add_image_rgb(&mut self, rgb: &[u8], width: i32, height: i32, stride: usize) -> Result<(), Error> {
        let row = 3 * width.max(0) as usize;
        let stride_eff = if stride == 0 { row } else { stride };
        let need = if width > 0 && height > 0 { stride_eff * (height as usize - 1) + row } else { 0 };
        if rgb.len() < need {
            return Err(Error {
                status: status::E_INVALID_ARGUMENT,
                message: format!("rgb buffer has {} bytes, needs {}", rgb.len(), need),
                summary: None,
            });
        }
        self.check(unsafe { uocr_session_add_image_rgb(self.h, rgb.as_ptr(), width, height, stride) })
    }

    pub fn clear_pages(&mut self) -> Result<(), Error> {
        self.check(unsafe { uocr_session_clear_pages(self.h) })
    }

    pub fn page_count(&self) -> Result<i32, Error> {
        let mut n = 0i32;
        self.check(unsafe { uocr_session_page_count(self.h, &mut n) })?;
        Ok(n)
    }

    /// Runs the pages; `on_event` returning false cancels (an `E_CANCELLED` error carrying the
    /// partial summary; the partial transcript is in `text()`).
    pub fn run<F: FnMut(&Event) -> bool>(&mut self, mut on_event: F) -> Result<RunSummary, Error> {
        let mut state = RunState { f: &mut on_event, panic: None };
        let mut sum = RunSummary::default();
        let st = unsafe {
            uocr_run_summary_init(&mut sum);
            uocr_session_run(self.h, Some(trampoline), &mut state as *mut RunState as *mut c_void, &mut sum)
        };
        if let Some(p) = state.panic.take() {
            panic::resume_unwind(p);
        }
        if st == status::E_CANCELLED {
            let mut e = self.err(st);
            e.summary = Some(sum);
            return Err(e);
        }
        self.check(st)?;
        Ok(sum)
    }

    /// The last run's transcript: the library's exact UTF-8 bytes.
    pub fn text(&self) -> Result<Vec<u8>, Error> {
        let mut n = 0usize;
        self.check(unsafe { uocr_session_text(self.h, std::ptr::null_mut(), 0, &mut n) })?;
        let mut buf = vec![0u8; n + 1];
        self.check(unsafe { uocr_session_text(self.h, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n) })?;
        buf.truncate(n);
        Ok(buf)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        unsafe { uocr_session_free(self.h) }
    }
}
