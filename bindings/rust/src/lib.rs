//! Safe Rust wrapper over the uocr C ABI (`c_api/uocr.h`, `libuocr.so`).
//!
//! ```no_run
//! let model = uocr::Model::load("models/tiny").unwrap();
//! let params = uocr::SessionParams { max_new_tokens: 512, ..Default::default() };
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
//! A document of any length: pages are handed over one at a time when the session needs them,
//! and only `pages_per_group` of them are held.
//!
//! ```no_run
//! # let model = uocr::Model::load("models/tiny").unwrap();
//! let params = uocr::SessionParams {
//!     pages_per_group: 2,
//!     checkpoint: Some(uocr::Checkpoint { path: "run.ckpt".into(), every_tokens: 0, resume: false }),
//!     ..Default::default()
//! };
//! let mut session = model.session(&params).unwrap();
//! let summary = session
//!     .run_pages(3600, |i| Ok(uocr::Page::File(format!("scan-{:04}.png", i).into())), |_| true)
//!     .unwrap(); // an Err returned by the page source comes back here, as it was
//! # let _ = summary;
//! ```
//!
//! `Model` is `Send + Sync` (the library's model is immutable); `Session` is `Send` but not
//! `Sync` (one thread at a time). Both free their handle on drop, in any order.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// UOCR_API_VERSION of the header this binding mirrors.
pub const API_VERSION: i32 = 14;

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

/// `SessionParams::cuda_graphs` values (`UOCR_CUDA_GRAPHS_*`): CUDA decode steps replay CUDA
/// graphs (same logits, less launch overhead); other backends ignore it.
pub mod cuda_graphs {
    /// The library's default: on.
    pub const DEFAULT: i32 = 0;
    pub const ON: i32 = 1;
    pub const OFF: i32 = 2;
}

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
    /// `page_time_budget_seconds` ran out (API 10).
    pub const TIME_BUDGET: i32 = 6;
}

// ---- raw ABI ------------------------------------------------------------------------------

#[repr(C)]
struct RawPage {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawModel {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawSession {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawEngine {
    _opaque: [u8; 0],
}

#[repr(C)]
struct RawEngineParams {
    struct_size: u32,
    backend: i32,
    device_index: i32,
    max_batch: i32,
    max_batch_wait_us: i32,
    cuda_graphs: i32,
    precision: i32,
    reserved0: i32,
}

#[repr(C)]
struct RawEngineInfo {
    struct_size: u32,
    backend: i32,
    device_index: i32,
    precision: i32,
    device: [c_char; 128],
    driver: [c_char; 64],
}

#[repr(C)]
struct ModelParams {
    struct_size: u32,
    api_version: u32,
    flags: u32,
    reserved0: u32,
}

/// `uocr_session_params` as the library reads it (`SessionParams` is the typed form).
#[repr(C)]
struct RawSessionParams {
    struct_size: u32,
    image_mode: i32,
    max_new_tokens: i64,
    prompt: *const c_char,
    window: i32,
    temperature: f32,
    top_p: f32,
    ngram_size: i32,
    seed: u64,
    ngram_window: i32,
    loop_guard: i32,
    max_image_pixels: u64,
    // API version 2
    backend: i32,
    device_index: i32,
    pages_per_group: i32,
    overlap_pages: i32,
    page_fallback_tokens: i32,
    reference_mode: i32,
    reference_pages: i32,
    reference_blocks: i32,
    reference_block_tokens: i32,
    positions: i32,
    checkpoint_path: *const c_char,
    checkpoint_every_tokens: i32,
    resume: i32,
    // API version 4
    max_batch: i32,
    max_batch_wait_us: i32,
    reference_gate_fan_out: i32,
    reference_gate_beam: i32,
    // API version 5
    cuda_graphs: i32,
    // API version 7
    model_defaults: i32,
    // API version 8
    slide_kv: i32,
    // API version 9
    max_image_bytes: u64,
    max_jpeg_scans: i32,
    // API version 10
    page_time_budget_seconds: f64,
    // API version 11
    precision: i32,
    // API version 14
    draft: i32,
    draft_max_tokens: i32,
    reserved_api14: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
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

/// `uocr_run_summary`. Out-structs carry this binding's `struct_size`, so the library writes no
/// more than this struct holds, however new it is.
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
    // API version 3
    /// Working memory besides the KV cache (vision and decoder workspaces), held at the end.
    pub scratch_bytes: u64,
    /// Largest `scratch_bytes` held during the run.
    pub peak_scratch_bytes: u64,
    /// Largest `kv_allocated_bytes + scratch_bytes` at one moment of the run.
    pub peak_bytes: u64,
    // API version 12
    /// The `Precision` the large products ran in, as an i32 (`Precision::F32 as i32`, ...).
    pub precision: i32,
    reserved_api12: i32,
    // API version 14
    /// Decoder passes of the generation: steps and draft verifications (one per token fed back
    /// without drafts).
    pub decode_passes: i64,
    /// Tokens the pages' drafts proposed.
    pub drafted_tokens: i64,
    /// Proposed tokens the model's own choice confirmed.
    pub accepted_tokens: i64,
}

// The layouts this binding assumes (64-bit targets), checked at compile time.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<ModelParams>() == 16);
    assert!(std::mem::size_of::<RawSessionParams>() == 192);
    assert!(std::mem::size_of::<ModelInfo>() == 40);
    assert!(std::mem::size_of::<RawEvent>() == 72);
    assert!(std::mem::size_of::<RunSummary>() == 168);
};

type Callback = extern "C" fn(*const RawEvent, *mut c_void) -> i32;
type PageCallback = extern "C" fn(i64, *mut RawPage, *mut c_void) -> i32;

#[link(name = "uocr")]
extern "C" {
    fn uocr_version_string() -> *const c_char;
    fn uocr_api_version() -> i32;
    fn uocr_status_string(status: i32) -> *const c_char;
    fn uocr_stop_reason_string(stop: i32) -> *const c_char;
    fn uocr_last_error() -> *const c_char;
    fn uocr_model_params_init_sized(p: *mut ModelParams, struct_size: u32);
    fn uocr_model_load(dir: *const c_char, p: *const ModelParams, out: *mut *mut RawModel) -> i32;
    fn uocr_model_free(m: *mut RawModel);
    fn uocr_model_get_info(m: *const RawModel, i: *mut ModelInfo) -> i32;
    fn uocr_session_params_init_sized(p: *mut RawSessionParams, struct_size: u32);
    fn uocr_session_create(m: *const RawModel, p: *const RawSessionParams, out: *mut *mut RawSession) -> i32;
    fn uocr_session_free(s: *mut RawSession);
    fn uocr_engine_params_init_sized(p: *mut RawEngineParams, struct_size: u32);
    fn uocr_engine_open(m: *const RawModel, p: *const RawEngineParams, out: *mut *mut RawEngine) -> i32;
    fn uocr_engine_free(e: *mut RawEngine);
    fn uocr_engine_info_init_sized(i: *mut RawEngineInfo, struct_size: u32);
    fn uocr_engine_get_info(e: *const RawEngine, i: *mut RawEngineInfo) -> i32;
    fn uocr_session_create_on_engine(e: *mut RawEngine, p: *const RawSessionParams, out: *mut *mut RawSession) -> i32;
    fn uocr_session_last_error(s: *const RawSession) -> *const c_char;
    fn uocr_session_add_image_file(s: *mut RawSession, path: *const c_char) -> i32;
    fn uocr_session_add_image_encoded(s: *mut RawSession, data: *const c_void, size: usize) -> i32;
    fn uocr_session_add_image_rgb(s: *mut RawSession, rgb: *const u8, w: i32, h: i32, stride: usize) -> i32;
    fn uocr_session_clear_pages(s: *mut RawSession) -> i32;
    fn uocr_session_page_count(s: *const RawSession, out: *mut i32) -> i32;
    fn uocr_session_run(s: *mut RawSession, cb: Option<Callback>, user: *mut c_void, sum: *mut RunSummary) -> i32;
    fn uocr_page_set_file(p: *mut RawPage, path: *const c_char) -> i32;
    fn uocr_page_set_encoded(p: *mut RawPage, data: *const c_void, size: usize) -> i32;
    fn uocr_page_set_rgb(p: *mut RawPage, rgb: *const u8, w: i32, h: i32, stride: usize) -> i32;
    fn uocr_page_set_draft(p: *mut RawPage, text: *const c_char, size: usize) -> i32;
    fn uocr_session_set_page_draft(s: *mut RawSession, index: i32, text: *const c_char, size: usize) -> i32;
    fn uocr_session_run_pages(
        s: *mut RawSession,
        page_count: i64,
        pages: PageCallback,
        pages_user: *mut c_void,
        cb: Option<Callback>,
        user: *mut c_void,
        sum: *mut RunSummary,
    ) -> i32;
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
    pub summary: Option<Box<RunSummary>>,
}

impl Error {
    /// An error of this binding's caller, e.g. a page source's (`Session::run_pages`).
    pub fn new(status: i32, message: impl Into<String>) -> Error {
        Error { status, message: message.into(), summary: None }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, status_name(self.status))
    }
}

impl std::error::Error for Error {}

/// So that a page source can use `?` on file reads.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(status::E_IO, e.to_string())
    }
}

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
    Error::new(status, cstr(unsafe { uocr_last_error() }))
}

fn check_library() -> Result<(), Error> {
    let v = unsafe { uocr_api_version() };
    if v < API_VERSION {
        return Err(Error::new(
            status::E_VERSION_MISMATCH,
            format!("libuocr {} implements API version {}, this binding needs {}", version(), v, API_VERSION),
        ));
    }
    Ok(())
}

fn c_string(s: &str, what: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::new(status::E_INVALID_ARGUMENT, format!("{} contains a NUL byte", what)))
}

fn path_cstring(path: &Path) -> Result<CString, Error> {
    let s = path.to_str().ok_or_else(|| Error::new(status::E_INVALID_ARGUMENT, format!("path {:?} is not UTF-8", path)))?;
    c_string(s, "path")
}

// The library reads `stride * (height - 1) + 3 * width` bytes of RGB rows: refuse a shorter slice.
fn check_rgb(rgb: &[u8], width: i32, height: i32, stride: usize) -> Result<(), Error> {
    let row = 3 * width.max(0) as usize;
    let stride = if stride == 0 { row } else { stride };
    let need = if width > 0 && height > 0 { stride * (height as usize - 1) + row } else { 0 };
    if rgb.len() < need {
        return Err(Error::new(status::E_INVALID_ARGUMENT, format!("rgb buffer has {} bytes, needs {}", rgb.len(), need)));
    }
    Ok(())
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
            uocr_model_params_init_sized(&mut p, std::mem::size_of::<ModelParams>() as u32);
            p.api_version = API_VERSION as u32;
            uocr_model_load(dir.as_ptr(), &p, &mut h)
        };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Model { h })
    }

    pub fn info(&self) -> Result<ModelInfo, Error> {
        let mut info = ModelInfo { struct_size: std::mem::size_of::<ModelInfo>() as u32, ..Default::default() };
        let st = unsafe { uocr_model_get_info(self.h, &mut info) };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(info)
    }

    /// A new session on an engine of its own (the library checks the parameters and reports what
    /// is wrong); sessions of this model asking for the same backend, device and options share one.
    pub fn session(&self, params: &SessionParams) -> Result<Session, Error> {
        let args = RawSessionArgs::new(params)?;
        let mut h: *mut RawSession = std::ptr::null_mut();
        let st = unsafe { uocr_session_create(self.h, &args.raw, &mut h) };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Session { h, _not_sync: PhantomData })
    }
}

/// `uocr_engine_params`, typed (API 13). `Default` is the library's defaults: the CPU, no batching.
#[derive(Clone, Debug)]
pub struct EngineParams {
    pub backend: Backend,
    pub device_index: i32,
    /// Sessions per batched decode step (>= 2; 0 or 1: off); `max_batch_wait_us` as in `SessionParams`.
    pub max_batch: i32,
    pub max_batch_wait_us: i32,
    /// A `cuda_graphs::*` value.
    pub cuda_graphs: i32,
    pub precision: Precision,
}

impl Default for EngineParams {
    fn default() -> Self {
        EngineParams {
            backend: Backend::Cpu,
            device_index: 0,
            max_batch: 0,
            max_batch_wait_us: 0,
            cuda_graphs: cuda_graphs::DEFAULT,
            precision: Precision::F32,
        }
    }
}

/// What an engine runs on (`uocr_engine_info`).
#[derive(Clone, Debug)]
pub struct EngineInfo {
    pub backend: Backend,
    pub device_index: i32,
    /// What its large products compute in: bf16 only where asked for and available.
    pub precision: Precision,
    /// The device's name (the CPU's model name on the CPU).
    pub device: String,
    /// The driver's version; empty on the CPU.
    pub driver: String,
}

fn backend_code(b: &Backend) -> i32 {
    match b {
        Backend::Cpu => 0,
        Backend::Vulkan => 1,
        Backend::Cuda => 2,
    }
}

fn c_array_string(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A model opened on one backend device (API 13): the device, the weights uploaded to it and, with
/// `max_batch` > 1, the batcher of its sessions' decode steps. Sessions made by `session` share
/// all of it. Share it across threads freely; it keeps the model alive.
pub struct Engine {
    h: *mut RawEngine,
}

unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

impl Engine {
    pub fn open(model: &Model, params: &EngineParams) -> Result<Engine, Error> {
        let mut raw = RawEngineParams {
            struct_size: 0,
            backend: 0,
            device_index: 0,
            max_batch: 0,
            max_batch_wait_us: 0,
            cuda_graphs: 0,
            precision: 0,
            reserved0: 0,
        };
        unsafe { uocr_engine_params_init_sized(&mut raw, std::mem::size_of::<RawEngineParams>() as u32) };
        raw.backend = backend_code(&params.backend);
        raw.device_index = params.device_index;
        raw.max_batch = params.max_batch;
        raw.max_batch_wait_us = params.max_batch_wait_us;
        raw.cuda_graphs = params.cuda_graphs;
        raw.precision = params.precision as i32;
        let mut h: *mut RawEngine = std::ptr::null_mut();
        let st = unsafe { uocr_engine_open(model.h, &raw, &mut h) };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Engine { h })
    }

    pub fn info(&self) -> Result<EngineInfo, Error> {
        let mut raw: RawEngineInfo = unsafe { std::mem::zeroed() };
        let st = unsafe {
            uocr_engine_info_init_sized(&mut raw, std::mem::size_of::<RawEngineInfo>() as u32);
            uocr_engine_get_info(self.h, &mut raw)
        };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(EngineInfo {
            backend: match raw.backend {
                1 => Backend::Vulkan,
                2 => Backend::Cuda,
                _ => Backend::Cpu,
            },
            device_index: raw.device_index,
            precision: if raw.precision == Precision::Bf16 as i32 { Precision::Bf16 } else { Precision::F32 },
            device: c_array_string(&raw.device),
            driver: c_array_string(&raw.driver),
        })
    }

    /// A new session on this engine: `params`' backend, device, batching, graphs and precision are
    /// left at their defaults (the engine's are used) or are the engine's; another choice is
    /// `E_INVALID_ARGUMENT`.
    pub fn session(&self, params: &SessionParams) -> Result<Session, Error> {
        let args = RawSessionArgs::new(params)?;
        let mut h: *mut RawSession = std::ptr::null_mut();
        let st = unsafe { uocr_session_create_on_engine(self.h, &args.raw, &mut h) };
        if st != status::OK {
            return Err(thread_error(st));
        }
        Ok(Session { h, _not_sync: PhantomData })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        unsafe { uocr_engine_free(self.h) }
    }
}

// `uocr_session_params` with the strings it points to, kept alive as long as it is.
struct RawSessionArgs {
    raw: RawSessionParams,
    _prompt: Option<CString>,
    _checkpoint: Option<CString>,
}

impl RawSessionArgs {
    fn new(params: &SessionParams) -> Result<RawSessionArgs, Error> {
        let prompt = params.prompt.as_deref().map(|p| c_string(p, "prompt")).transpose()?;
        let checkpoint = params.checkpoint.as_ref().map(|c| path_cstring(&c.path)).transpose()?;
        let mut raw = raw_defaults();
        raw.image_mode = match params.image_mode {
            ImageMode::Base => 0,
            ImageMode::Gundam => 1,
        };
        raw.max_new_tokens = params.max_new_tokens;
        raw.prompt = prompt.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        raw.window = params.window;
        raw.temperature = params.temperature;
        raw.top_p = params.top_p;
        raw.ngram_size = params.ngram_size;
        raw.seed = params.seed;
        raw.ngram_window = params.ngram_window;
        raw.loop_guard = params.loop_guard as i32;
        raw.max_image_pixels = params.max_image_pixels;
        raw.backend = backend_code(&params.backend);
        raw.device_index = params.device_index;
        raw.pages_per_group = params.pages_per_group;
        raw.overlap_pages = params.overlap_pages;
        raw.page_fallback_tokens = params.page_fallback_tokens;
        if let Reference::Sparse { pages, blocks, block_tokens } = params.reference {
            raw.reference_mode = 1;
            raw.reference_pages = pages;
            raw.reference_blocks = blocks;
            raw.reference_block_tokens = block_tokens;
        }
        raw.positions = match params.positions {
            Positions::Limit => 0,
            Positions::Extrapolate => 1,
            Positions::Group => 2,
        };
        if let (Some(c), Some(path)) = (&params.checkpoint, &checkpoint) {
            raw.checkpoint_path = path.as_ptr();
            raw.checkpoint_every_tokens = c.every_tokens;
            raw.resume = c.resume as i32;
        }
        raw.max_batch = params.max_batch;
        raw.max_batch_wait_us = params.max_batch_wait_us;
        raw.reference_gate_fan_out = params.reference_gate_fan_out;
        raw.reference_gate_beam = params.reference_gate_beam;
        raw.cuda_graphs = params.cuda_graphs;
        raw.model_defaults = if params.model_defaults { 0 } else { 1 };
        raw.slide_kv = match params.slide_kv {
            SlideKv::ModelDefault => 0,
            SlideKv::Reuse => 1,
            SlideKv::Recompute => 2,
        };
        raw.max_image_bytes = params.max_image_bytes;
        raw.max_jpeg_scans = params.max_jpeg_scans;
        raw.page_time_budget_seconds = params.page_time_budget_seconds;
        raw.precision = params.precision as i32;
        raw.draft = if params.draft { 0 } else { 1 };
        raw.draft_max_tokens = params.draft_max_tokens;
        Ok(RawSessionArgs { raw, _prompt: prompt, _checkpoint: checkpoint })
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { uocr_model_free(self.h) }
    }
}

fn raw_defaults() -> RawSessionParams {
    let mut p = std::mem::MaybeUninit::<RawSessionParams>::zeroed();
    unsafe {
        uocr_session_params_init_sized(p.as_mut_ptr(), std::mem::size_of::<RawSessionParams>() as u32);
        p.assume_init()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageMode {
    /// One 1024x1024 view per page (several pages always use it).
    Base,
    /// A global view + 640 px tiles (single page only).
    Gundam,
}

/// Where the session runs; the backend must be built into the library (else `E_UNSUPPORTED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Vulkan,
    Cuda,
}

/// What each decoding step attends to of the held pages' reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// All of it: exact R-SWA.
    Dense,
    /// SR-SWA: `pages` pages by a page gate, then `blocks` blocks of `block_tokens` visual tokens
    /// (0: 4, 64, 16; -1 for pages or blocks: all). Faster, approximate.
    Sparse { pages: i32, blocks: i32, block_tokens: i32 },
}

/// Positions past the model's context length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// Refuse such documents, as upstream does.
    Limit,
    /// Allow them (up to 2^24; quality unmeasured there).
    Extrapolate,
    /// Every page group at the positions of a document of G pages: bounded at any length, not
    /// upstream's one-shot numbering once the group slides (API 6).
    Group,
}

/// What a slide of the page group does with the KV it keeps (API 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlideKv {
    /// The model folder's `uocr_decode.json` (with `model_defaults`), else `Reuse`.
    ModelDefault,
    /// Keep the kept pages' and the window's KV as they are (upstream's infinite decoding).
    Reuse,
    /// Compute the held pages, the prompt's tail and the window again at each slide, as a fresh
    /// G-page document holds them (slower slides; what models trained on whole documents read best with).
    Recompute,
}

/// The vision encoder's and the prefill's large products (API 11). `F32` is the library's
/// default; `Bf16` runs where the backend and CPU have bf16 dot products; elsewhere `F32` runs (the run summary
/// says which, API 12).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Float32 products, the reference.
    F32 = 0,
    /// bf16 inputs, float32 sums.
    Bf16 = 1,
}

/// Crash-safe resume: the run's state is saved to `path` after the prefill, at every page
/// boundary and every `every_tokens` tokens (0: only those). With `resume` the run continues from
/// it; `Session::text` then holds only the text generated since (see c_api/README.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub every_tokens: i32,
    pub resume: bool,
}

/// `uocr_session_params`, typed. `Default` is the library's defaults (`uocr_session_params_init_sized`);
/// the integer fields keep the C meaning of 0 ("the library's default") and -1 (see uocr.h).
#[derive(Clone, Debug)]
pub struct SessionParams {
    pub image_mode: ImageMode,
    /// 0: until EOS or the context limit.
    pub max_new_tokens: i64,
    /// None: upstream's prompt; else it must contain one "<image>".
    pub prompt: Option<String>,
    /// R-SWA window; -1: the model's; 0: full attention.
    pub window: i32,
    /// 0: greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// No-repeat n-gram size; 0 disables the rule.
    pub ngram_size: i32,
    pub seed: u64,
    pub ngram_window: i32,
    pub loop_guard: bool,
    /// A page image's decode budget, checked from its header before any pixel is decoded (a page
    /// over it fails with `E_INVALID_IMAGE`, naming the limit). Pixels, width x height; 0: 100000000.
    pub max_image_pixels: u64,
    /// Bytes of samples, width x height x channels x bytes per sample as the file stores them, and
    /// of the image file (API 9); 0: 2^30.
    pub max_image_bytes: u64,
    /// Scans of one JPEG (API 9); 0: 100; a negative value is refused.
    pub max_jpeg_scans: i32,
    /// Seconds a run may take per page of its document (API 10): it stops between two tokens
    /// or while a page is prepared, with `stop::TIME_BUDGET`, the text so far and the last
    /// checkpoint kept; 0: none.
    pub page_time_budget_seconds: f64,
    pub precision: Precision,
    /// true (default): verify the pages' draft texts (`Session::set_page_draft`,
    /// `Session::run_pages_with_drafts`) where there are any: the same transcript in fewer decoder
    /// passes where a draft is right (API 14); false: one pass per token.
    pub draft: bool,
    /// The most tokens one pass verifies; 0: 16; else 1..256.
    pub draft_max_tokens: i32,
    pub backend: Backend,
    pub device_index: i32,
    /// Pages whose KV is held at once (>= 2; 0: the model folder's, else 4).
    pub pages_per_group: i32,
    /// Pages kept when the group slides (1..G-1; 0: the model folder's, else G - 1).
    pub overlap_pages: i32,
    /// Slide after this many tokens without a "<PAGE>" marker (0: 4096; -1: never).
    pub page_fallback_tokens: i32,
    pub reference: Reference,
    /// `Limit` is the C default (0): with `model_defaults`, the model folder's positions if it names some.
    pub positions: Positions,
    /// None: no checkpoints.
    pub checkpoint: Option<Checkpoint>,
    /// Continuous batching: sessions of one model (CPU or CUDA) run in different threads with the
    /// same `max_batch` (>= 2; 0 or 1: off) and `max_batch_wait_us` (0: 1000; -1: no wait) have
    /// their decode steps computed together, each getting the tokens it would get alone.
    pub max_batch: i32,
    pub max_batch_wait_us: i32,
    /// SR-SWA page gate (with `Reference::Sparse`): pages per gate-tree node (0: 4; else >= 2) and
    /// nodes kept per level (0: twice the page budget).
    pub reference_gate_fan_out: i32,
    pub reference_gate_beam: i32,
    /// CUDA graphs for decode steps on the CUDA backend: a `cuda_graphs::*` value (DEFAULT: on).
    pub cuda_graphs: i32,
    /// true (default): `pages_per_group`, `overlap_pages` and `positions` left at their C default
    /// take the model folder's `uocr_decode.json` (API 7); false: the library's defaults.
    pub model_defaults: bool,
    pub slide_kv: SlideKv,
}

impl Default for SessionParams {
    fn default() -> Self {
        let raw = raw_defaults();
        SessionParams {
            image_mode: if raw.image_mode == 1 { ImageMode::Gundam } else { ImageMode::Base },
            max_new_tokens: raw.max_new_tokens,
            prompt: None,
            window: raw.window,
            temperature: raw.temperature,
            top_p: raw.top_p,
            ngram_size: raw.ngram_size,
            seed: raw.seed,
            ngram_window: raw.ngram_window,
            loop_guard: raw.loop_guard != 0,
            max_image_pixels: raw.max_image_pixels,
            max_image_bytes: raw.max_image_bytes,
            max_jpeg_scans: raw.max_jpeg_scans,
            page_time_budget_seconds: raw.page_time_budget_seconds,
            precision: if raw.precision == Precision::F32 as i32 { Precision::F32 } else { Precision::Bf16 },
            draft: raw.draft == 0,
            draft_max_tokens: raw.draft_max_tokens,
            backend: Backend::Cpu,
            device_index: raw.device_index,
            pages_per_group: raw.pages_per_group,
            overlap_pages: raw.overlap_pages,
            page_fallback_tokens: raw.page_fallback_tokens,
            reference: Reference::Dense,
            positions: Positions::Limit,
            checkpoint: None,
            max_batch: raw.max_batch,
            max_batch_wait_us: raw.max_batch_wait_us,
            reference_gate_fan_out: raw.reference_gate_fan_out,
            reference_gate_beam: raw.reference_gate_beam,
            cuda_graphs: raw.cuda_graphs,
            model_defaults: raw.model_defaults == 0,
            slide_kv: match raw.slide_kv {
                1 => SlideKv::Reuse,
                2 => SlideKv::Recompute,
                _ => SlideKv::ModelDefault,
            },
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

/// One page of a `Session::run_pages` document; its bytes borrowed or owned (`.into()` makes
/// either). The library decodes or copies it before the source is asked for the next one.
#[derive(Clone, Debug)]
pub enum Page<'a> {
    /// A PNG/JPEG/... file.
    File(PathBuf),
    /// PNG/JPEG/... bytes.
    Encoded(Cow<'a, [u8]>),
    /// Interleaved RGB rows, `stride` bytes apart (0: 3 * width).
    Rgb { data: Cow<'a, [u8]>, width: i32, height: i32, stride: usize },
}

/// Pages plus one transcription at a time; `Send`, not `Sync`.
pub struct Session {
    h: *mut RawSession,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

unsafe impl Send for Session {}

type Panic = Box<dyn std::any::Any + Send>;

struct RunState<'f> {
    f: &'f mut dyn FnMut(&Event) -> bool,
    panic: Option<Panic>,
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

struct PageState<'f, 'd, 'p> {
    f: &'f mut dyn FnMut(i64) -> Result<Page<'p>, Error>,
    drafts: &'d mut dyn FnMut(i64) -> Result<Option<Vec<u8>>, Error>,
    failure: Option<Error>,
    panic: Option<Panic>,
}

extern "C" fn page_trampoline(index: i64, page: *mut RawPage, user: *mut c_void) -> i32 {
    let state = unsafe { &mut *(user as *mut PageState) };
    let mut hand_over = || -> Result<(), Error> {
        if let Some(text) = (state.drafts)(index)? {
            unsafe { uocr_page_set_draft(page, text.as_ptr() as *const c_char, text.len()) };
        }
        set_page(page, &(state.f)(index)?)
    };
    // The source's error (or panic) aborts the run; run_pages returns (or re-raises) it afterwards.
    match panic::catch_unwind(AssertUnwindSafe(&mut hand_over)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            state.failure = Some(e);
            1
        }
        Err(p) => {
            state.panic = Some(p);
            1
        }
    }
}

// A status returned by uocr_page_set_* needs no handling here: the library fails the run with it
// and its message.
fn set_page(page: *mut RawPage, p: &Page) -> Result<(), Error> {
    match p {
        Page::File(path) => {
            let path = path_cstring(path)?;
            unsafe { uocr_page_set_file(page, path.as_ptr()) };
        }
        Page::Encoded(data) => unsafe {
            uocr_page_set_encoded(page, data.as_ptr() as *const c_void, data.len());
        },
        Page::Rgb { data, width, height, stride } => {
            check_rgb(data, *width, *height, *stride)?;
            unsafe { uocr_page_set_rgb(page, data.as_ptr(), *width, *height, *stride) };
        }
    }
    Ok(())
}

impl Session {
    fn err(&self, st: i32) -> Error {
        Error::new(st, cstr(unsafe { uocr_session_last_error(self.h) }))
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
        check_rgb(rgb, width, height, stride)?;
        self.check(unsafe { uocr_session_add_image_rgb(self.h, rgb.as_ptr(), width, height, stride) })
    }

    /// Page `index`'s draft text (0-based, of the pages added; empty removes it): UTF-8 that
    /// another reader gives for that page (a PDF's text layer, an earlier OCR pass). Decoding
    /// verifies it: the same transcript, fewer decoder passes where it is right (API 14; the run
    /// summary's `decode_passes`, `drafted_tokens`, `accepted_tokens`).
    pub fn set_page_draft(&mut self, index: i32, text: &[u8]) -> Result<(), Error> {
        self.check(unsafe { uocr_session_set_page_draft(self.h, index, text.as_ptr() as *const c_char, text.len()) })
    }

    pub fn clear_pages(&mut self) -> Result<(), Error> {
        self.check(unsafe { uocr_session_clear_pages(self.h) })
    }

    pub fn page_count(&self) -> Result<i32, Error> {
        let mut n = 0i32;
        self.check(unsafe { uocr_session_page_count(self.h, &mut n) })?;
        Ok(n)
    }

    /// Runs the pages added; `on_event` returning false cancels (an `E_CANCELLED` error carrying
    /// the partial summary; the partial transcript is in `text()`).
    pub fn run<F: FnMut(&Event) -> bool>(&mut self, mut on_event: F) -> Result<RunSummary, Error> {
        self.run_with(&mut on_event, |h, cb, user, sum| unsafe { uocr_session_run(h, cb, user, sum) })
    }

    /// Runs a document of `page_count` pages that `pages(index)` hands over one at a time (0, 1,
    /// ... each once), when the session needs them; the pages added with `add_image_*` are not
    /// used. An `Err` from `pages` stops the run and is returned as it is (a panic is re-raised).
    /// Events, cancellation and errors otherwise as `run`.
    pub fn run_pages<'p, P, F>(&mut self, page_count: i64, pages: P, on_event: F) -> Result<RunSummary, Error>
    where
        P: FnMut(i64) -> Result<Page<'p>, Error>,
        F: FnMut(&Event) -> bool,
    {
        self.run_pages_with_drafts(page_count, pages, |_| Ok(None), on_event)
    }

    /// `run_pages` whose pages come with draft texts: `drafts(index)`, asked just before
    /// `pages(index)`, gives page `index`'s draft (`None`: none; see `set_page_draft`). An `Err`
    /// stops the run as one from `pages` does.
    pub fn run_pages_with_drafts<'p, P, D, F>(
        &mut self,
        page_count: i64,
        mut pages: P,
        mut drafts: D,
        mut on_event: F,
    ) -> Result<RunSummary, Error>
    where
        P: FnMut(i64) -> Result<Page<'p>, Error>,
        D: FnMut(i64) -> Result<Option<Vec<u8>>, Error>,
        F: FnMut(&Event) -> bool,
    {
        let mut source = PageState { f: &mut pages, drafts: &mut drafts, failure: None, panic: None };
        let source_ptr = &mut source as *mut PageState as *mut c_void;
        let result = self.run_with(&mut on_event, |h, cb, user, sum| unsafe {
            uocr_session_run_pages(h, page_count, page_trampoline, source_ptr, cb, user, sum)
        });
        if let Some(p) = source.panic.take() {
            panic::resume_unwind(p);
        }
        match source.failure.take() {
            Some(e) => Err(e),
            None => result,
        }
    }

    fn run_with(
        &mut self,
        on_event: &mut dyn FnMut(&Event) -> bool,
        start: impl FnOnce(*mut RawSession, Option<Callback>, *mut c_void, *mut RunSummary) -> i32,
    ) -> Result<RunSummary, Error> {
        let mut state = RunState { f: on_event, panic: None };
        let mut sum = RunSummary { struct_size: std::mem::size_of::<RunSummary>() as u32, ..Default::default() };
        let st = start(self.h, Some(trampoline), &mut state as *mut RunState as *mut c_void, &mut sum);
        if let Some(p) = state.panic.take() {
            panic::resume_unwind(p);
        }
        if st == status::E_CANCELLED {
            let mut e = self.err(st);
            e.summary = Some(Box::new(sum));
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
