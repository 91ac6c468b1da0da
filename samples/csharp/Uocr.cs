// P/Invoke binding of the uocr C ABI (c_api/uocr.h, libuocr.so). Builds with mono's mcs:
//   mcs -out:ocr.exe Uocr.cs Ocr.cs && LD_LIBRARY_PATH=/dir/of/libuocr mono ocr.exe MODEL IMAGE
//
//   using (var model = new Uocr.Model("models/tiny"))
//   using (var s = model.CreateSession(new Uocr.SessionOptions { MaxNewTokens = 512 })) {
//       s.AddImageFile("page.png");
//       var summary = s.Run(e => { if (e.Type == Uocr.EventType.Token) Console.Error.Write(e.TextString); return true; });
//       byte[] text = s.Text();
//   }
//
// Structs mirror the C layout (no bool, fixed-width fields). Handles are SafeHandles, so models
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

    public enum StopReason { Eos = 0, MaxTokens = 1, ContextLimit = 2, Loop = 3, Cancelled = 4, NoToken = 5 }

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
        public IntPtr CheckpointPath; // not exposed by this sample binding (NULL: no checkpoints)
        public int CheckpointEveryTokens;
        public int Resume;
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
    }

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int EventCallback(IntPtr ev, IntPtr userData);

    internal static class Native
    {
        const string Lib = "uocr";
        public const int ApiVersion = 2; // UOCR_API_VERSION this binding mirrors

        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_version_string();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_api_version();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_status_string(int status);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_stop_reason_string(int stop);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_last_error();
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_model_params_init(ref ModelParams p);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_model_load(byte[] dir, ref ModelParams p, out IntPtr model);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_model_free(IntPtr model);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_model_info_init(ref ModelInfo info);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_model_get_info(ModelHandle model, ref ModelInfo info);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_session_params_init(ref SessionParams p);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_create(ModelHandle model, ref SessionParams p, out IntPtr session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_session_free(IntPtr session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern IntPtr uocr_session_last_error(SessionHandle session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_file(SessionHandle session, byte[] path);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_encoded(SessionHandle session, byte[] data, UIntPtr size);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_add_image_rgb(SessionHandle session, byte[] rgb, int width, int height, UIntPtr stride);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_clear_pages(SessionHandle session);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_page_count(SessionHandle session, out int count);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern void uocr_run_summary_init(ref RunSummary summary);
        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl)] public static extern int uocr_session_run(SessionHandle session, EventCallback callback, IntPtr userData, ref RunSummary summary);
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
    }

    internal sealed class ModelHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ModelHandle() : base(true) { }
        public ModelHandle(IntPtr h) : base(true) { SetHandle(h); }
        protected override bool ReleaseHandle() { Native.uocr_model_free(handle); return true; }
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
        public ulong MaxImagePixels = 0;
        public int PagesPerGroup = 0;   // 0: the library's defaults (see uocr.h)
        public int OverlapPages = 0;
        public int ReferenceMode = 0;
    }

    public sealed class Model : IDisposable
    {
        internal readonly ModelHandle Handle;

        public Model(string directory)
        {
            Library.CheckVersion();
            var p = new ModelParams();
            Native.uocr_model_params_init(ref p);
            IntPtr h;
            int st = Native.uocr_model_load(Native.CString(directory), ref p, out h);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            Handle = new ModelHandle(h);
        }

        public ModelInfo Info()
        {
            var info = new ModelInfo();
            Native.uocr_model_info_init(ref info);
            int st = Native.uocr_model_get_info(Handle, ref info);
            if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
            return info;
        }

        public Session CreateSession(SessionOptions o) { return new Session(this, o ?? new SessionOptions()); }

        public void Dispose() { Handle.Dispose(); }
    }

    public sealed class Session : IDisposable
    {
        readonly SessionHandle handle;

        internal Session(Model model, SessionOptions o)
        {
            var p = new SessionParams();
            Native.uocr_session_params_init(ref p);
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
            p.PagesPerGroup = o.PagesPerGroup;
            p.OverlapPages = o.OverlapPages;
            p.ReferenceMode = o.ReferenceMode;
            GCHandle prompt = default(GCHandle);
            try
            {
                if (o.Prompt != null)
                {
                    prompt = GCHandle.Alloc(Native.CString(o.Prompt), GCHandleType.Pinned);
                    p.Prompt = prompt.AddrOfPinnedObject();
                }
                IntPtr h;
                int st = Native.uocr_session_create(model.Handle, ref p, out h);
                if (st != Status.Ok) throw new UocrException(st, Native.Utf8(Native.uocr_last_error()));
                handle = new SessionHandle(h);
            }
            finally
            {
                if (prompt.IsAllocated) prompt.Free();
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
            if (rgb == null) throw new ArgumentNullException("rgb");
            long row = 3L * Math.Max(width, 0), s = stride == 0 ? row : stride;
            long need = width > 0 && height > 0 ? s * (height - 1) + row : 0;
            if (rgb.LongLength < need) throw new ArgumentException("rgb buffer has " + rgb.LongLength + " bytes, needs " + need);
            Check(Native.uocr_session_add_image_rgb(handle, rgb, width, height, (UIntPtr)(ulong)stride));
        }

        public void ClearPages() { Check(Native.uocr_session_clear_pages(handle)); }

        public int PageCount()
        {
            int n;
            Check(Native.uocr_session_page_count(handle, out n));
            return n;
        }

        /// <summary>Runs the pages; onEvent returning false cancels (CancelledException).
        /// An exception thrown by onEvent cancels the run and is rethrown here.</summary>
        public RunSummary Run(Func<Event, bool> onEvent)
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
            var sum = new RunSummary();
            Native.uocr_run_summary_init(ref sum);
            int st = Native.uocr_session_run(handle, cb, IntPtr.Zero, ref sum);
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
