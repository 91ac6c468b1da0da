// P/Invoke binding of the uocr C ABI (c_api/uocr.h, libuocr.so). Compiled with the program that
// uses it, e.g. with mono's mcs (from the repository root; README.md beside this file):
//   mcs -out:ocr.exe bindings/csharp/Uocr.cs samples/csharp/Ocr.cs
//   LD_LIBRARY_PATH=/dir/of/libuocr mono ocr.exe MODEL IMAGE
//
//   using (var model = new Uocr.Model("models/tiny"))
//   using (var s = model.CreateSession(new Uocr.SessionOptions { MaxNewTokens = 512 })) {
//       s.AddImageFile("page.png");
//       var summary = s.Run(e => { if (e.Type == Uocr.EventType.Token) Console.Error.Write(e.TextString); return true; });
//       byte[] text = s.Text();
//   }
//
// A document of any length: pages are handed over one at a time when the session needs them, and
// only PagesPerGroup of them are held (an exception thrown by the page source ends the run and is
// rethrown by RunPages):
//
//   var o = new Uocr.SessionOptions { PagesPerGroup = 2, CheckpointPath = "run.ckpt" };
//   using (var s = model.CreateSession(o))
//       s.RunPages(3600, i => Uocr.Page.File(string.Format("scan-{0:D4}.png", i)), null);
//
// Structs mirror the C layout (no bool, fixed-width fields); the structs the library fills in carry
// this binding's own size (the _init_sized functions too), so a newer library writes no more than they hold. Handles are SafeHandles, so models
// and sessions are freed by Dispose or the finalizer, in any order. A Model may be shared by
// threads; a Session is used by one thread at a time.
using System;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Win32.SafeHandles;

namespace Uocr
{
    public static class Status
    {
        public const int Ok = 0;
        public const int InvalidArgument = -1;
        public const int Io = -2;
        public const int InvalidModel = -3;
        public const int InvalidImage = -4;
        public const int Unsupported = -5;
        public const int OutOfMemory = -6;
        public const int Tokenizer = -7;
        public const int Cancelled = -8;
        public const int Internal = -9;
        public const int InvalidHandle = -100;
        public const int VersionMismatch = -101;
        public const int Busy = -102;
        public const int BufferTooSmall = -103;
    }

    public enum EventType { Token = 1, Page = 2, Block = 3 }

    public enum StopReason { Eos = 0, MaxTokens = 1, ContextLimit = 2, Loop = 3, Cancelled = 4, NoToken = 5, TimeBudget = 6 }

    public enum Backend { Cpu = 0, Vulkan = 1, Cuda = 2 }

    /// <summary>What each decoding step attends to of the held pages: all of it (exact R-SWA), or
    /// SR-SWA's page gate and block selection (faster, approximate).</summary>
    public enum ReferenceMode { Dense = 0, Sparse = 1 }

    /// <summary>Documents past the model's context length: refused (as upstream), extrapolated, or
    /// every page group at a G-page document's positions (bounded at any length; API 6).</summary>
    public enum Positions { Limit = 0, Extrapolate = 1, Group = 2 }

    /// <summary>CUDA graphs for decode steps on the CUDA backend (same logits, less launch
    /// overhead; other backends ignore it). Default: the library's, which is on.</summary>
    public enum CudaGraphs { Default = 0, On = 1, Off = 2 }

    /// <summary>Whether PagesPerGroup, OverlapPages and Positions left at 0 take the model
    /// folder's uocr_decode.json (Use, the default) or the library's defaults (API 7).</summary>
    public enum ModelDefaults { Use = 0, Ignore = 1 }

    /// <summary>What a slide of the page group does with the KV it keeps: the model folder's
    /// choice (ModelDefault, else Reuse), Reuse (upstream's infinite decoding), or Recompute the
    /// held pages, prompt tail and window as a fresh G-page document holds them (API 8).</summary>
    public enum SlideKv { ModelDefault = 0, Reuse = 1, Recompute = 2 }
    /// <summary>The vision encoder's and the prefill's large products: F32 (the library's default)
    /// or Bf16, which runs where the backend and CPU have bf16 dot products (else F32 runs).</summary>
    public enum Precision { F32 = 0, Bf16 = 1 }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ModelParams
    {
        public uint StructSize;
        public uint ApiVersion;
        public uint Flags;
        public uint Reserved0;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct SessionParams
    {
        public uint StructSize;
        public int ImageMode;
        public long MaxNewTokens;
        public IntPtr Prompt;
        public int Window;
        public float Temperature;
        public float TopP;
        public int NgramSize;
        public ulong Seed;
        public int NgramWindow;
        public int LoopGuard;
        public ulong MaxImagePixels;
        // API version 2: 0 is the default for each (see uocr.h).
        public int Backend;
        public int DeviceIndex;
        public int PagesPerGroup;
        public int OverlapPages;
        public int PageFallbackTokens;
        public int ReferenceMode;
        public int ReferencePages;
        public int ReferenceBlocks;
        public int ReferenceBlockTokens;
        public int Positions;
        public IntPtr CheckpointPath;
        public int CheckpointEveryTokens;
        public int Resume;
        // API version 4
        public int MaxBatch;
        public int MaxBatchWaitUs;
        public int ReferenceGateFanOut;
        public int ReferenceGateBeam;
        // API version 5
        public int CudaGraphs;
        // API version 7
        public int ModelDefaults;
        // API version 8
        public int SlideKv;
        // API version 9
        public ulong MaxImageBytes;
        public int MaxJpegScans;
        // API version 10
        public double PageTimeBudgetSeconds;
        // API version 11
        public int Precision;
        // API version 14
        public int Draft;
        public int DraftMaxTokens;
        public int ReservedApi14;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct EngineParams
    {
        public uint StructSize;
        public int Backend;
        public int DeviceIndex;
        public int MaxBatch;
        public int MaxBatchWaitUs;
        public int CudaGraphs;
        public int Precision;
        public int Reserved0;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct RawEngineInfo
    {
        public uint StructSize;
        public int Backend;
        public int DeviceIndex;
        public int Precision;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 128)] public byte[] Device;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 64)] public byte[] Driver;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct ModelInfo
    {
        public uint StructSize;
        public int HiddenSize;
        public int Layers;
        public int VocabSize;
        public int SlidingWindow;
        public int ImageSize;
        public int MaxPositions;
        public int BosId;
        public int EosId;
        public int ImageTokenId;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct RawEvent
    {
        public uint StructSize;
        public int Type;
        public int TokenId;
        public int Page;
        public IntPtr Text;
        public UIntPtr TextLen;
        public IntPtr Label;
        public int Box0, Box1, Box2, Box3;
        public int BoxPx0, BoxPx1, BoxPx2, BoxPx3;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct RunSummary
    {
        public uint StructSize;
        public int StopReason;
        public int Empty;
        public int Reserved0;
        public long Pages;
        public long VisualTokens;
        public long PromptTokens;
        public long GeneratedTokens;
        public double VisionSeconds;
        public double PrefillSeconds;
        public double DecodeSeconds;
        public ulong ReferenceKvBytes;
        public ulong WindowKvBytes;
        public ulong KvAllocatedBytes;
        public ulong PeakKvBytes;
        public ulong TextLen;
        // API version 3
        public ulong ScratchBytes;      // working memory besides the KV cache (vision and decoder workspaces), held at the end
        public ulong PeakScratchBytes;  // largest ScratchBytes held during the run
        public ulong PeakBytes;         // largest KvAllocatedBytes + ScratchBytes at one moment of the run
        // API version 12
        public int Precision;           // the Precision the large products ran in
        public int ReservedApi12;
        // API version 14
        public long DecodePasses;       // decoder passes of the generation: steps and draft verifications
        public long DraftedTokens;      // tokens the pages' drafts proposed
        public long AcceptedTokens;     // proposed tokens the model's own choice confirmed
    }

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int EventCallback(IntPtr ev, IntPtr userData);

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int PageCallback(long index, IntPtr page, IntPtr userData);

    internal static class Native
    {
        const string Lib = "uocr";
        public const int ApiVersion = 14; // UOCR_API_VERSION this binding mirrors

        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_version_string();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_api_version();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_status_string(int status);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_stop_reason_string(int stop);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_last_error();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_model_params_init_sized(ref ModelParams p, uint structSize);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_model_load(byte[] dir, ref ModelParams p, out IntPtr model);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_model_free(IntPtr model);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_model_get_info(ModelHandle model, ref ModelInfo info);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_session_params_init_sized(ref SessionParams p, uint structSize);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_create(ModelHandle model, ref SessionParams p, out IntPtr session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_engine_params_init_sized(ref EngineParams p, uint structSize);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_engine_open(ModelHandle model, ref EngineParams p, out IntPtr engine);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_engine_free(IntPtr engine);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_engine_info_init_sized(ref RawEngineInfo info, uint structSize);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_engine_get_info(EngineHandle engine, ref RawEngineInfo info);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_create_on_engine(EngineHandle engine, ref SessionParams p, out IntPtr session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_session_free(IntPtr session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_session_last_error(SessionHandle session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_file(SessionHandle session, byte[] path);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_encoded(SessionHandle session, byte[] data, UIntPtr size);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_rgb(SessionHandle session, byte[] rgb, int width, int height, UIntPtr stride);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_clear_pages(SessionHandle session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_page_count(SessionHandle session, out int count);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_run(SessionHandle session, EventCallback callback, IntPtr userData, ref RunSummary summary);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_page_set_file(IntPtr page, byte[] path);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_page_set_encoded(IntPtr page, byte[] data, UIntPtr size);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_page_set_rgb(IntPtr page, byte[] rgb, int width, int height, UIntPtr stride);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_page_set_draft(IntPtr page, byte[] text, UIntPtr size);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_set_page_draft(SessionHandle session, int index, byte[] text, UIntPtr size);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_run_pages(SessionHandle session, long pageCount, PageCallback pages, IntPtr pagesUserData, EventCallback callback, IntPtr userData, ref RunSummary summary);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_text(SessionHandle session, byte[] buf, UIntPtr capacity, out UIntPtr length);

        // NUL-terminated UTF-8 (static or library-owned) to a string.
        public static string Utf8(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0) ++n;
            var bytes = new byte[n];
            Marshal.Copy(p, bytes, 0, n);
            return Encoding.UTF8.GetString(bytes);
        }

        public static byte[] CString(string s)
        {
            if (s.IndexOf('\0') >= 0) throw new ArgumentException("string contains a NUL character");
            var bytes = Encoding.UTF8.GetBytes(s);
            Array.Resize(ref bytes, bytes.Length + 1);
            return bytes;
        }

        // The library reads stride * (height - 1) + 3 * width bytes of RGB rows: refuse fewer.
        public static void CheckRgb(byte[] rgb, int width, int height, int stride)
        {
            if (rgb == null) throw new ArgumentNullException("rgb");
            long row = 3L * Math.Max(width, 0), s = stride == 0 ? row : stride;
            long need = width > 0 && height > 0 ? s * (height - 1) + row : 0;
            if (rgb.LongLength < need) throw new ArgumentException("rgb buffer has " + rgb.LongLength + " bytes, needs " + need);
        }
    }

    internal sealed class ModelHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ModelHandle() : base(true) { }
        public ModelHandle(IntPtr h) : base(true) { SetHandle(h); }
        protected override bool ReleaseHandle() { Native.uocr_model_free(handle); return true; }
    }

    internal sealed class EngineHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public EngineHandle() : base(true) { }
        public EngineHandle(IntPtr h) : base(true) { SetHandle(h); }
        protected override bool ReleaseHandle() { Native.uocr_engine_free(handle); return true; }
    }

    internal sealed class SessionHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public SessionHandle() : base(true) { }
        public SessionHandle(IntPtr h) : base(true) { SetHandle(h); }
        protected override bool ReleaseHandle() { Native.uocr_session_free(handle); return true; }
    }

    public class UocrException : Exception
    {
        public int Status { get; private set; }
        public UocrException(int status, string message)
            : base(message + " (" + Library.StatusName(status) + ")") { Status = status; }
    }

    /// <summary>The callback cancelled the run; the partial summary is attached, the partial text is in Session.Text().</summary>
    public class CancelledException : UocrException
    {
        public RunSummary Summary { get; private set; }
        public CancelledException(string message, RunSummary summary) : base(Uocr.Status.Cancelled, message) { Summary = summary; }
    }

    public static class Library
    {
        public static string Version { get { return Native.Utf8(Native.uocr_version_string()); } }
        public static int ApiVersion { get { return Native.uocr_api_version(); } }
        public static string StatusName(int status) { return Native.Utf8(Native.uocr_status_string(status)); }
        public static string StopReasonName(int stop) { return Native.Utf8(Native.uocr_stop_reason_string(stop)); }

        internal static void CheckVersion()
        {
            int v = Native.uocr_api_version();
            if (v < Native.ApiVersion)
                throw new UocrException(Uocr.Status.VersionMismatch, "libuocr " + Version + " implements API version " + v + ", this binding needs " + Native.ApiVersion);
        }
    }

    /// <summary>A streamed event, copied out of the library (valid after the callback).</summary>
    public sealed class Event
    {
        public EventType Type;
        public int TokenId;
        public int Page;
        public byte[] Text;      // Token: the exact UTF-8 bytes it completes (may be empty)
        public string Label;     // Block
        public int[] Box;        // Block: 0..999
        public int[] BoxPx;      // Block: page pixels
        public string TextString { get { return Encoding.UTF8.GetString(Text); } }
    }

    /// <summary>One page of a RunPages document; the library decodes or copies it before the
    /// source is asked for the next one.</summary>
    public sealed class Page
    {
        // A status the uocr_page_set_* call returns needs no handling: the library fails the run
        // with it and its message.
        readonly Action<IntPtr> set;
        Page(Action<IntPtr> set) { this.set = set; }

        /// <summary>A PNG/JPEG/... file.</summary>
        public static Page File(string path)
        {
            var p = Native.CString(path);
            return new Page(h => Native.uocr_page_set_file(h, p));
        }

        /// <summary>PNG/JPEG/... bytes.</summary>
        public static Page Encoded(byte[] data)
        {
            if (data == null) throw new ArgumentNullException("data");
            return new Page(h => Native.uocr_page_set_encoded(h, data, (UIntPtr)data.Length));
        }

        /// <summary>Interleaved RGB rows, stride bytes apart (0: 3 * width).</summary>
        public static Page Rgb(byte[] rgb, int width, int height, int stride = 0)
        {
            Native.CheckRgb(rgb, width, height, stride);
            return new Page(h => Native.uocr_page_set_rgb(h, rgb, width, height, (UIntPtr)(ulong)stride));
        }

        /// <summary>This page with a draft text: what another reader gives for it (a PDF's text
        /// layer, an earlier OCR pass), verified as Session.SetPageDraft's.</summary>
        public Page WithDraft(string text) { return WithDraft(Encoding.UTF8.GetBytes(text)); }

        public Page WithDraft(byte[] text)
        {
            if (text == null) throw new ArgumentNullException("text");
            return new Page(h => { Native.uocr_page_set_draft(h, text, (UIntPtr)text.Length); set(h); });
        }

        internal void Set(IntPtr page) { set(page); }
    }

    /// <summary>uocr_session_params; null / 0 leave the library's defaults (see uocr.h).</summary>
    public sealed class SessionOptions
    {
        public int ImageMode = 0;
        public long MaxNewTokens = 0;
        public string Prompt = null;
        public int? Window;
        public float? Temperature;
        public float? TopP;
        public int? NgramSize;
        public ulong? Seed;
        public int? NgramWindow;
        public bool? LoopGuard;
        // A page image's decode budget, checked from its header before any pixel is decoded (a page over
        // it fails with Status.InvalidImage, naming the limit).
        public ulong MaxImagePixels = 0;     // width x height (0: 100000000)
        public ulong MaxImageBytes = 0;      // width x height x channels x bytes per sample as the file stores them, and the file (0: 2^30)
        public int MaxJpegScans = 0;         // scans of one JPEG (0: 100; negative is refused)
        // Seconds a run may take per page of its document: it stops between two tokens or while a
        // page is prepared, with StopReason.TimeBudget, the text so far and the last checkpoint
        // kept (0: none).
        public double PageTimeBudgetSeconds = 0;
        public Precision? Precision;         // null: the library's (F32)
        // Verify the pages' draft texts (SetPageDraft, Page.WithDraft) where there are any: the
        // same transcript in fewer decoder passes where a draft is right; false: a pass per token.
        public bool Draft = true;
        public int DraftMaxTokens = 0;       // the most tokens one pass verifies (0: 16; else 1..256)
        public Backend Backend = Backend.Cpu;
        public int DeviceIndex = 0;
        public int PagesPerGroup = 0;        // pages whose KV is held at once (>= 2; 0: the model folder's, else 4)
        public int OverlapPages = 0;         // kept when the group slides (1..G-1; 0: the model folder's, else G - 1)
        public int PageFallbackTokens = 0;   // slide after this many tokens without "<PAGE>" (0: 4096; -1: never)
        public ReferenceMode Reference = ReferenceMode.Dense;
        public int ReferencePages = 0;       // Sparse: pages a step consults (0: 4; -1: all)
        public int ReferenceBlocks = 0;      // Sparse: blocks a step attends to (0: 64; -1: all)
        public int ReferenceBlockTokens = 0; // Sparse: visual tokens per block (0: 16)
        public Positions Positions = Positions.Limit; // Limit (0): the model folder's, if it names some (ModelDefaults)
        public string CheckpointPath = null; // null: no checkpoints (crash-safe resume, see c_api/README.md)
        public int CheckpointEveryTokens = 0; // also every N tokens (0: after the prefill and at page boundaries)
        public bool Resume = false;          // continue from CheckpointPath
        // Continuous batching (CPU, CUDA): sessions of one model in different threads with the same
        // two values step together, each getting the tokens it would get alone.
        public int MaxBatch = 0;             // sessions per batched step (0 or 1: off)
        public int MaxBatchWaitUs = 0;       // longest a step waits for the others (0: 1000; -1: no wait)
        public int ReferenceGateFanOut = 0;  // Sparse: pages per gate-tree node (0: 4; else >= 2)
        public int ReferenceGateBeam = 0;    // Sparse: gate nodes kept per level (0: twice ReferencePages)
        public CudaGraphs CudaGraphs = CudaGraphs.Default; // CUDA backend: decode steps replay CUDA graphs
        public ModelDefaults ModelDefaults = ModelDefaults.Use;
        public SlideKv SlideKv = SlideKv.ModelDefault;
    }

    public sealed class Model : IDisposable
    {
        internal readonly ModelHandle Handle;

        public Model(string directory)
        {
            Library.CheckVersion();
            var p = new ModelParams();
            Native.uocr_model_params_init_sized(ref p, (uint)Marshal.SizeOf(typeof(ModelParams)));
            p.ApiVersion = (uint)Native.ApiVersion;
            IntPtr h;
            int st = Native.uocr_model_load(Native.CString(directory), ref p, out h);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            Handle = new ModelHandle(h);
        }

        public ModelInfo Info()
        {
            var info = new ModelInfo { StructSize = (uint)Marshal.SizeOf(typeof(ModelInfo)) };
            int st = Native.uocr_model_get_info(Handle, ref info);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            return info;
        }

        public Session CreateSession(SessionOptions o) { return new Session(this, null, o ?? new SessionOptions()); }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>uocr_engine_params (API 13): the device a model is opened on and what its sessions share.</summary>
    public sealed class EngineOptions
    {
        public Backend Backend = Backend.Cpu;
        public int DeviceIndex = 0;
        public int MaxBatch = 0;             // sessions per batched step (0 or 1: off)
        public int MaxBatchWaitUs = 0;       // longest a step waits for the others (0: 1000; -1: no wait)
        public CudaGraphs CudaGraphs = CudaGraphs.Default;
        public Precision Precision = Precision.F32;
    }

    /// <summary>What an engine runs on (uocr_engine_info).</summary>
    public sealed class EngineInfo
    {
        public Backend Backend;
        public int DeviceIndex;
        public Precision Precision;  // what its large products compute in
        public string Device;        // the device's name (the CPU's model name on the CPU)
        public string Driver;        // "" on the CPU
    }

    /// <summary>A model opened on one backend device (API 13): the device, the weights uploaded to it
    /// and, with MaxBatch > 1, the batcher of its sessions' decode steps. Sessions made by
    /// CreateSession share all of it; may be shared by threads; keeps the model alive.</summary>
    public sealed class Engine : IDisposable
    {
        internal readonly EngineHandle Handle;

        public Engine(Model model, EngineOptions o)
        {
            o = o ?? new EngineOptions();
            var p = new EngineParams();
            Native.uocr_engine_params_init_sized(ref p, (uint)Marshal.SizeOf(typeof(EngineParams)));
            p.Backend = (int)o.Backend;
            p.DeviceIndex = o.DeviceIndex;
            p.MaxBatch = o.MaxBatch;
            p.MaxBatchWaitUs = o.MaxBatchWaitUs;
            p.CudaGraphs = (int)o.CudaGraphs;
            p.Precision = (int)o.Precision;
            IntPtr h;
            int st = Native.uocr_engine_open(model.Handle, ref p, out h);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            Handle = new EngineHandle(h);
        }

        public EngineInfo Info()
        {
            var raw = new RawEngineInfo { Device = new byte[128], Driver = new byte[64] };
            Native.uocr_engine_info_init_sized(ref raw, (uint)Marshal.SizeOf(typeof(RawEngineInfo)));
            int st = Native.uocr_engine_get_info(Handle, ref raw);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            return new EngineInfo
            {
                Backend = (Backend)raw.Backend,
                DeviceIndex = raw.DeviceIndex,
                Precision = (Precision)raw.Precision,
                Device = Text(raw.Device),
                Driver = Text(raw.Driver),
            };
        }

        static string Text(byte[] nulTerminated)
        {
            int n = Array.IndexOf(nulTerminated, (byte)0);
            return System.Text.Encoding.UTF8.GetString(nulTerminated, 0, n < 0 ? nulTerminated.Length : n);
        }

        /// <summary>A session on this engine: o's Backend, DeviceIndex, MaxBatch, MaxBatchWaitUs,
        /// CudaGraphs and Precision are left at their defaults or are the engine's (else
        /// Status.InvalidArgument).</summary>
        public Session CreateSession(SessionOptions o) { return new Session(null, this, o ?? new SessionOptions()); }

        public void Dispose() { Handle.Dispose(); }
    }

    public sealed class Session : IDisposable
    {
        readonly SessionHandle handle;

        // On `model` (an engine of the library's choosing) or on `engine`.
        internal Session(Model model, Engine engine, SessionOptions o)
        {
            var p = new SessionParams();
            Native.uocr_session_params_init_sized(ref p, (uint)Marshal.SizeOf(typeof(SessionParams)));
            p.ImageMode = o.ImageMode;
            p.MaxNewTokens = o.MaxNewTokens;
            if (o.Window.HasValue) p.Window = o.Window.Value;
            if (o.Temperature.HasValue) p.Temperature = o.Temperature.Value;
            if (o.TopP.HasValue) p.TopP = o.TopP.Value;
            if (o.NgramSize.HasValue) p.NgramSize = o.NgramSize.Value;
            if (o.Seed.HasValue) p.Seed = o.Seed.Value;
            if (o.NgramWindow.HasValue) p.NgramWindow = o.NgramWindow.Value;
            if (o.LoopGuard.HasValue) p.LoopGuard = o.LoopGuard.Value ? 1 : 0;
            p.MaxImagePixels = o.MaxImagePixels;
            p.Backend = (int)o.Backend;
            p.DeviceIndex = o.DeviceIndex;
            p.PagesPerGroup = o.PagesPerGroup;
            p.OverlapPages = o.OverlapPages;
            p.PageFallbackTokens = o.PageFallbackTokens;
            p.ReferenceMode = (int)o.Reference;
            p.ReferencePages = o.ReferencePages;
            p.ReferenceBlocks = o.ReferenceBlocks;
            p.ReferenceBlockTokens = o.ReferenceBlockTokens;
            p.Positions = (int)o.Positions;
            p.CheckpointEveryTokens = o.CheckpointEveryTokens;
            p.Resume = o.Resume ? 1 : 0;
            p.MaxBatch = o.MaxBatch;
            p.MaxBatchWaitUs = o.MaxBatchWaitUs;
            p.ReferenceGateFanOut = o.ReferenceGateFanOut;
            p.ReferenceGateBeam = o.ReferenceGateBeam;
            p.CudaGraphs = (int)o.CudaGraphs;
            p.ModelDefaults = (int)o.ModelDefaults;
            p.SlideKv = (int)o.SlideKv;
            p.MaxImageBytes = o.MaxImageBytes;
            p.MaxJpegScans = o.MaxJpegScans;
            p.PageTimeBudgetSeconds = o.PageTimeBudgetSeconds;
            if (o.Precision.HasValue) p.Precision = (int)o.Precision.Value;
            p.Draft = o.Draft ? 0 : 1;
            p.DraftMaxTokens = o.DraftMaxTokens;
            // The library copies the strings during uocr_session_create: pinned until it returns.
            GCHandle prompt = default(GCHandle), checkpoint = default(GCHandle);
            try
            {
                if (o.Prompt != null)
                {
                    prompt = GCHandle.Alloc(Native.CString(o.Prompt), GCHandleType.Pinned);
                    p.Prompt = prompt.AddrOfPinnedObject();
                }
                if (o.CheckpointPath != null)
                {
                    checkpoint = GCHandle.Alloc(Native.CString(o.CheckpointPath), GCHandleType.Pinned);
                    p.CheckpointPath = checkpoint.AddrOfPinnedObject();
                }
                IntPtr h;
                int st = engine != null ? Native.uocr_session_create_on_engine(engine.Handle, ref p, out h)
                                        : Native.uocr_session_create(model.Handle, ref p, out h);
                if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
                handle = new SessionHandle(h);
            }
            finally
            {
                if (prompt.IsAllocated) prompt.Free();
                if (checkpoint.IsAllocated) checkpoint.Free();
            }
        }

        void Check(int st)
        {
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_session_last_error(handle)));
        }

        public void AddImageFile(string path) { Check(Native.uocr_session_add_image_file(handle, Native.CString(path))); }

        public void AddImageEncoded(byte[] data)
        {
            if (data == null) throw new ArgumentNullException("data");
            Check(Native.uocr_session_add_image_encoded(handle, data, (UIntPtr)data.Length));
        }

        public void AddImageRgb(byte[] rgb, int width, int height, int stride)
        {
            Native.CheckRgb(rgb, width, height, stride);
            Check(Native.uocr_session_add_image_rgb(handle, rgb, width, height, (UIntPtr)(ulong)stride));
        }

        /// <summary>Page index's draft text (0-based, of the pages added; empty removes it): what
        /// another reader gives for that page. Decoding verifies it: the same transcript, fewer
        /// decoder passes where it is right (RunSummary.DecodePasses, DraftedTokens, AcceptedTokens).</summary>
        public void SetPageDraft(int index, string text) { SetPageDraft(index, Encoding.UTF8.GetBytes(text)); }

        public void SetPageDraft(int index, byte[] text)
        {
            if (text == null) throw new ArgumentNullException("text");
            Check(Native.uocr_session_set_page_draft(handle, index, text, (UIntPtr)text.Length));
        }

        public void ClearPages() { Check(Native.uocr_session_clear_pages(handle)); }

        public int PageCount()
        {
            int n;
            Check(Native.uocr_session_page_count(handle, out n));
            return n;
        }

        /// <summary>Runs the pages added; onEvent (may be null) returning false cancels
        /// (CancelledException). An exception thrown by onEvent cancels the run and is rethrown here.</summary>
        public RunSummary Run(Func<Event, bool> onEvent)
        {
            return RunWith(onEvent, (EventCallback cb, ref RunSummary sum) => Native.uocr_session_run(handle, cb, IntPtr.Zero, ref sum));
        }

        /// <summary>Runs a document of pageCount pages that getPage(index) hands over one at a time
        /// (0, 1, ... each once), when the session needs them; the pages added with AddImage* are
        /// not used. An exception thrown by getPage stops the run and is rethrown here. Events,
        /// cancellation and errors otherwise as Run.</summary>
        public RunSummary RunPages(long pageCount, Func<long, Page> getPage, Func<Event, bool> onEvent)
        {
            if (getPage == null) throw new ArgumentNullException("getPage");
            ExceptionDispatchInfo failure = null;
            PageCallback pages = (index, page, user) =>
            {
                try
                {
                    getPage(index).Set(page);
                    return 0;
                }
                catch (Exception ex)  // never unwind through native frames
                {
                    failure = ExceptionDispatchInfo.Capture(ex);
                    return 1;
                }
            };
            try
            {
                return RunWith(onEvent, (EventCallback cb, ref RunSummary sum) =>
                    Native.uocr_session_run_pages(handle, pageCount, pages, IntPtr.Zero, cb, IntPtr.Zero, ref sum));
            }
            catch (CancelledException)
            {
                if (failure != null) failure.Throw();  // the page source's exception, not the cancellation it caused
                throw;
            }
            finally
            {
                GC.KeepAlive(pages);  // the library calls it until the run returns
            }
        }

        delegate int Start(EventCallback callback, ref RunSummary summary);

        RunSummary RunWith(Func<Event, bool> onEvent, Start start)
        {
            ExceptionDispatchInfo failure = null;
            EventCallback cb = null;
            if (onEvent != null)
            {
                cb = (ptr, user) =>
                {
                    if (failure != null) return 1;
                    try
                    {
                        var raw = (RawEvent)Marshal.PtrToStructure(ptr, typeof(RawEvent));
                        var e = new Event
                        {
                            Type = (EventType)raw.Type,
                            TokenId = raw.TokenId,
                            Page = raw.Page,
                            Text = new byte[(int)(ulong)raw.TextLen],
                            Label = Native.Utf8(raw.Label),
                            Box = new[] { raw.Box0, raw.Box1, raw.Box2, raw.Box3 },
                            BoxPx = new[] { raw.BoxPx0, raw.BoxPx1, raw.BoxPx2, raw.BoxPx3 },
                        };
                        if (e.Text.Length > 0) Marshal.Copy(raw.Text, e.Text, 0, e.Text.Length);
                        return onEvent(e) ? 0 : 1;
                    }
                    catch (Exception ex)  // never unwind through native frames
                    {
                        failure = ExceptionDispatchInfo.Capture(ex);
                        return 1;
                    }
                };
            }
            var sum = new RunSummary { StructSize = (uint)Marshal.SizeOf(typeof(RunSummary)) };
            int st = start(cb, ref sum);
            GC.KeepAlive(cb);
            if (failure != null) failure.Throw();
            if (st == Status.Cancelled) throw new CancelledException(Native.Utf8(Native.uocr_session_last_error(handle)), sum);
            Check(st);
            return sum;
        }

        /// <summary>The last run's transcript: the library's exact UTF-8 bytes.</summary>
        public byte[] Text()
        {
            UIntPtr n;
            Check(Native.uocr_session_text(handle, null, UIntPtr.Zero, out n));
            var buf = new byte[(long)(ulong)n + 1];
            Check(Native.uocr_session_text(handle, buf, (UIntPtr)buf.LongLength, out n));
            Array.Resize(ref buf, (int)(ulong)n);
            return buf;
        }

        public void Dispose() { handle.Dispose(); }
    }
}
