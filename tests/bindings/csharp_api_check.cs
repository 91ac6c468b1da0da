// The C# binding's API beyond the transcript (binding_csharp* compare ocr.exe's output with the
// C++ API): pages handed over by a delegate, its exceptions, checkpoints, errors.
//   mcs -out:check.exe bindings/csharp/Uocr.cs tests/bindings/csharp_api_check.cs
//   mono check.exe MODEL_DIR PAGE0 PAGE1 PAGE2        (exit status: the number of failures)
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using Uocr;

static class ApiCheck
{
    static int failures;

    static void Check(bool ok, string what)
    {
        if (ok) return;
        ++failures;
        Console.WriteLine("FAILED: " + what);
    }

    class Jammed : Exception
    {
        public Jammed() : base("scanner jammed on page 2") { }
    }

    // Runs `run` with an event callback that records the token ids.
    static List<int> Tokens(Func<Func<Event, bool>, RunSummary> run)
    {
        var ids = new List<int>();
        run(e => { if (e.Type == EventType.Token) ids.Add(e.TokenId); return true; });
        return ids;
    }

    static T Expect<T>(Action action, string what) where T : Exception
    {
        try
        {
            action();
            Check(false, what + ": no exception");
        }
        catch (T e)
        {
            return e;
        }
        catch (Exception e)
        {
            Check(false, what + ": " + e.GetType().Name + ": " + e.Message);
        }
        return null;
    }

    // Slides after 5 tokens without a "<PAGE>" marker, so a 3-page document needs page 2 mid-run.
    static SessionOptions Sliding(long maxNewTokens)
    {
        return new SessionOptions { MaxNewTokens = maxNewTokens, PagesPerGroup = 2, PageFallbackTokens = 5 };
    }

    static int Main(string[] args)
    {
        if (args.Length != 4)
        {
            Console.Error.WriteLine("usage: check.exe MODEL_DIR PAGE0 PAGE1 PAGE2");
            return 2;
        }
        // uocr_session_params as uocr.h lays it out on 64-bit targets (the binding's struct is compiled in here).
        if (IntPtr.Size == 8)
        {
            Check(Marshal.SizeOf(typeof(SessionParams)) == 192, "sizeof(uocr_session_params) == 192");
            Check((long)Marshal.OffsetOf(typeof(SessionParams), "Precision") == 176, "precision at offset 176");
            Check((long)Marshal.OffsetOf(typeof(SessionParams), "Draft") == 180, "draft at offset 180");
            Check(Marshal.SizeOf(typeof(RunSummary)) == 168, "sizeof(uocr_run_summary) == 168");
            Check((long)Marshal.OffsetOf(typeof(RunSummary), "DecodePasses") == 144, "decode_passes at offset 144");
            Check((long)Marshal.OffsetOf(typeof(SessionParams), "PageTimeBudgetSeconds") == 168, "page_time_budget_seconds at offset 168");
            Check((long)Marshal.OffsetOf(typeof(SessionParams), "MaxImageBytes") == 152, "max_image_bytes at offset 152");
            Check((long)Marshal.OffsetOf(typeof(SessionParams), "MaxJpegScans") == 160, "max_jpeg_scans at offset 160");
        }
        string[] pages = args.Skip(1).ToArray();
        Func<long, Page> fromFile = i => Page.File(pages[i]);
        using (var model = new Model(args[0]))
        {
            // Pages from a delegate (file, RGB, encoded) give the tokens of the same pages added up front.
            byte[] png = File.ReadAllBytes(pages[2]);
            byte[] rgb = Enumerable.Range(0, 3 * 64 * 48).Select(i => (byte)(7 * i % 251)).ToArray();
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 6 }))
            {
                s.AddImageFile(pages[0]);
                s.AddImageRgb(rgb, 64, 48, 0);
                s.AddImageEncoded(png);
                var upFront = Tokens(s.Run);
                var asked = new List<long>();
                var handed = Tokens(f => s.RunPages(3, i =>
                {
                    asked.Add(i);
                    return i == 0 ? Page.File(pages[0]) : i == 1 ? Page.Rgb(rgb, 64, 48) : Page.Encoded(png);
                }, f));
                Check(handed.Count == 6 && handed.SequenceEqual(upFront), "RunPages tokens equal the added pages' tokens");
                Check(asked.SequenceEqual(new long[] { 0, 1, 2 }), "each page asked for once, in order");
                Check(s.PageCount() == 3, "RunPages leaves the added pages alone");
            }

            // The delegate throws on page 2 (asked for when the group slides): the run ends and
            // the exception reaches the caller as it was; the session stays usable.
            using (var s = model.CreateSession(Sliding(24)))
            {
                int before = 0;
                var jam = Expect<Jammed>(() => s.RunPages(3, i => { if (i == 2) throw new Jammed(); return fromFile(i); },
                    e => { if (e.Type == EventType.Token) ++before; return true; }), "page source exception");
                Check(jam != null && jam.Message == "scanner jammed on page 2", "page source exception message");
                Check(before == 5, "page 2 asked for after 5 tokens, got " + before);
                var summary = s.RunPages(3, fromFile, null);
                Check(summary.Pages == 3, "run after a failed source");
                Check(summary.PeakBytes >= summary.PeakKvBytes && summary.PeakKvBytes > 0, "peak bytes cover the KV");
                Check(summary.ScratchBytes > 0 && summary.PeakScratchBytes >= summary.ScratchBytes, "scratch bytes");

                var bad = Expect<UocrException>(() => s.RunPages(2, i => Page.Encoded(new byte[] { 1, 2, 3 }), null), "undecodable page");
                Check(bad != null && bad.Status == Status.InvalidImage && bad.Message.Contains("cannot decode"), "undecodable page status");
                Expect<ArgumentException>(() => s.RunPages(2, i => Page.Rgb(new byte[10], 4, 2), null), "short RGB page");
                var none = Expect<UocrException>(() => s.RunPages(0, fromFile, null), "no pages");
                Check(none != null && none.Status == Status.InvalidArgument, "no pages status");
            }
            var g1 = Expect<UocrException>(() => model.CreateSession(new SessionOptions { PagesPerGroup = 1 }), "pages_per_group 1");
            Check(g1 != null && g1.Status == Status.InvalidArgument && g1.Message.Contains("pages_per_group"), "pages_per_group 1 message");

            // The typed options reach the library: SR-SWA with full budgets is exactly dense
            // attention, with one page and one block it is not; a missing device is refused.
            Func<SessionOptions, List<int>> run = o => { using (var s = model.CreateSession(o)) return Tokens(f => s.RunPages(3, fromFile, f)); };
            List<int> full = run(Sliding(24));
            var all = Sliding(24);
            all.Reference = ReferenceMode.Sparse;
            all.ReferencePages = -1;
            all.ReferenceBlocks = -1;
            Check(run(all).SequenceEqual(full), "SR-SWA with full budgets equals dense");
            var narrow = Sliding(24);
            narrow.Reference = ReferenceMode.Sparse;
            narrow.ReferencePages = 1;
            narrow.ReferenceBlocks = 1;
            Check(!run(narrow).SequenceEqual(full), "SR-SWA on one page and block differs from dense");
            var device = Expect<UocrException>(() => model.CreateSession(new SessionOptions { Backend = Backend.Vulkan, DeviceIndex = 1000 }), "missing device");
            Check(device != null && device.Status == Status.Unsupported, "missing device status");
            // API 4 fields: a gate of fan-out 2 keeping one node per level runs; out-of-range values are refused.
            narrow.ReferenceGateFanOut = 2;
            narrow.ReferenceGateBeam = 1;
            Check(run(narrow).Count > 0, "SR-SWA with a fan-out-2 gate runs");
            var gate = Expect<UocrException>(() => model.CreateSession(new SessionOptions { ReferenceGateFanOut = 1 }), "gate fan-out 1");
            Check(gate != null && gate.Status == Status.InvalidArgument && gate.Message.Contains("reference_gate_fan_out"), "gate fan-out message");
            var batch = Expect<UocrException>(() => model.CreateSession(new SessionOptions { MaxBatch = -1 }), "max_batch -1");
            Check(batch != null && batch.Status == Status.InvalidArgument && batch.Message.Contains("max_batch"), "max_batch message");
            // API 5: graphs off runs (the CPU ignores the field: dense's tokens); out of range is refused.
            var graphsOff = Sliding(24);
            graphsOff.CudaGraphs = CudaGraphs.Off;
            Check(run(graphsOff).SequenceEqual(full), "CUDA graphs off runs, tokens unchanged on the CPU");
            var graphs = Expect<UocrException>(() => model.CreateSession(new SessionOptions { CudaGraphs = (CudaGraphs)3 }), "cuda_graphs 3");
            Check(graphs != null && graphs.Status == Status.InvalidArgument && graphs.Message.Contains("cuda_graphs"), "cuda_graphs message");
            // API 7: the tiny model's folder has no uocr_decode.json, so ignoring it changes nothing.
            var ignore = Sliding(24);
            ignore.ModelDefaults = ModelDefaults.Ignore;
            Check(run(ignore).SequenceEqual(full), "ModelDefaults.Ignore runs, tokens unchanged");
            var defaults = Expect<UocrException>(() => model.CreateSession(new SessionOptions { ModelDefaults = (ModelDefaults)2 }), "model_defaults 2");
            Check(defaults != null && defaults.Status == Status.InvalidArgument && defaults.Message.Contains("model_defaults"), "model_defaults message");
            // API 8: slides that recompute the group run; reuse is the tiny model's (it names nothing).
            var reuse = Sliding(24);
            reuse.SlideKv = SlideKv.Reuse;
            Check(run(reuse).SequenceEqual(full), "SlideKv.Reuse runs, tokens unchanged");
            var recompute = Sliding(24);
            recompute.SlideKv = SlideKv.Recompute;
            Check(run(recompute).Count > 0, "SlideKv.Recompute runs");
            var slide = Expect<UocrException>(() => model.CreateSession(new SessionOptions { SlideKv = (SlideKv)3 }), "slide_kv 3");
            Check(slide != null && slide.Status == Status.InvalidArgument && slide.Message.Contains("slide_kv"), "slide_kv message");
            // API 9: the decode budget: a page over MaxImageBytes is refused naming it; a negative scan limit is refused.
            using (var s = model.CreateSession(new SessionOptions { MaxImageBytes = 1000 }))
            {
                var big = Expect<UocrException>(() => s.AddImageFile(pages[0]), "page over max_image_bytes");
                Check(big != null && big.Status == Status.InvalidImage && big.Message.Contains("max_image_bytes"), "max_image_bytes message");
            }
            var scans = Expect<UocrException>(() => model.CreateSession(new SessionOptions { MaxJpegScans = -1 }), "max_jpeg_scans -1");
            Check(scans != null && scans.Status == Status.InvalidArgument && scans.Message.Contains("max_jpeg_scans"), "max_jpeg_scans message");
            // API 10: a time budget per page spent before the page is ready stops the run before its first token.
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 8, PageTimeBudgetSeconds = 1e-9 }))
            {
                s.AddImageFile(pages[0]);
                RunSummary sum = s.Run(e => true);
                Check(sum.StopReason == (int)StopReason.TimeBudget && sum.GeneratedTokens == 0, "time budget stops the run before its first token");
            }

            // API 11/12: f32 by default, bf16 on request (f32 where the CPU has no bf16 dot products);
            // the summary says which ran.
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 2, Precision = Precision.Bf16 }))
            {
                s.AddImageFile(pages[0]);
                RunSummary sum = s.Run(e => true);
                Check(sum.Precision == (int)Precision.Bf16 || sum.Precision == (int)Precision.F32, "Bf16 precision reported");
            }
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 2 }))
            {
                s.AddImageFile(pages[0]);
                Check(s.Run(e => true).Precision == (int)Precision.F32, "F32 by default");
            }
            var precision = Expect<UocrException>(() => model.CreateSession(new SessionOptions { Precision = (Precision)2 }), "precision 2");
            Check(precision != null && precision.Status == Status.InvalidArgument && precision.Message.Contains("precision"), "precision message");

            // API 13: an engine; its sessions read as the model's, and refuse another engine choice.
            var vkBatch = Expect<UocrException>(() => new Engine(model, new EngineOptions { Backend = Backend.Vulkan, MaxBatch = 2 }), "batching on Vulkan");
            Check(vkBatch != null && vkBatch.Status == Status.Unsupported, "batching on Vulkan is unsupported");
            string onEngine, onModel;
            using (var engine = new Engine(model, new EngineOptions { MaxBatch = 2 }))
            {
                EngineInfo info = engine.Info();
                Check(info.Backend == Backend.Cpu && info.DeviceIndex == 0 && info.Precision == Precision.F32 &&
                      info.Device.Length > 0 && info.Driver == "", "engine info");
                var mismatch = Expect<UocrException>(() => engine.CreateSession(new SessionOptions { MaxBatch = 3 }), "another engine's batching");
                Check(mismatch != null && mismatch.Status == Status.InvalidArgument && mismatch.Message.Contains("its engine runs"), "engine mismatch message");
                using (var s = engine.CreateSession(new SessionOptions { MaxNewTokens = 6 }))
                {
                    s.AddImageFile(pages[0]);
                    s.Run(e => true);
                    onEngine = System.Text.Encoding.UTF8.GetString(s.Text());
                }
            }
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 6 }))
            {
                s.AddImageFile(pages[0]);
                s.Run(e => true);
                onModel = System.Text.Encoding.UTF8.GetString(s.Text());
            }
            Check(onEngine.Length > 0 && onEngine == onModel, "a session on an engine reads as one on the model");

            // API 14: page drafts. The transcript is the same with a draft (here the run's own text)
            // and without; the summary counts the passes; bad drafts and values are refused.
            var draftMax = Expect<UocrException>(() => model.CreateSession(new SessionOptions { DraftMaxTokens = 300 }), "draft_max_tokens 300");
            Check(draftMax != null && draftMax.Status == Status.InvalidArgument && draftMax.Message.Contains("draft_max_tokens"), "draft_max_tokens message");
            byte[] plainText;
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 12, Draft = false }))
            {
                s.AddImageFile(pages[0]);
                RunSummary plain = s.Run(e => true);
                plainText = s.Text();
                // a pass per token fed back: the last one is not, when MaxNewTokens stops the run
                Check(plain.DecodePasses == plain.GeneratedTokens - 1 && plain.DraftedTokens == 0, "no draft: a pass per token");
            }
            using (var s = model.CreateSession(new SessionOptions { MaxNewTokens = 12 }))
            {
                s.AddImageFile(pages[0]);
                s.SetPageDraft(0, plainText);
                RunSummary drafted = s.Run(e => true);
                Check(s.Text().SequenceEqual(plainText), "a draft leaves the transcript as it is");
                Check(drafted.DecodePasses <= drafted.GeneratedTokens && drafted.AcceptedTokens <= drafted.DraftedTokens, "passes with a draft");
                var notAdded = Expect<UocrException>(() => s.SetPageDraft(1, "x"), "draft of a page not added");
                Check(notAdded != null && notAdded.Status == Status.InvalidArgument, "draft of a page not added is refused");
            }
            var plainPages = run(new SessionOptions { MaxNewTokens = 24, PagesPerGroup = 2, PageFallbackTokens = 5, Draft = false });
            using (var s = model.CreateSession(Sliding(24)))
            {
                var drafted = Tokens(f => s.RunPages(3, i => Page.File(pages[i]).WithDraft(plainText), f));
                Check(drafted.SequenceEqual(plainPages) && plainPages.SequenceEqual(full), "pages with drafts read as pages without");
            }

            // A run cancelled after 14 tokens resumes from its last checkpoint (token 12).
            string ckpt = Path.Combine(Path.GetTempPath(), "uocr_cs_api_" + System.Diagnostics.Process.GetCurrentProcess().Id + ".ckpt");
            Func<bool, SessionOptions> withCheckpoint = resume =>
            {
                var o = Sliding(24);
                o.CheckpointPath = ckpt;
                o.CheckpointEveryTokens = 4;
                o.Resume = resume;
                return o;
            };
            using (var s = model.CreateSession(withCheckpoint(false)))
            {
                var seen = new List<int>();
                var c = Expect<CancelledException>(() => s.RunPages(3, fromFile, e =>
                {
                    if (e.Type == EventType.Token) seen.Add(e.TokenId);
                    return seen.Count < 14;
                }), "cancelled checkpointed run");
                Check(c != null && c.Summary.GeneratedTokens == 14, "cancelled after 14 tokens");
                Check(full.Count == 24 && seen.SequenceEqual(full.Take(14)), "checkpointed run follows the same tokens");
            }
            using (var s = model.CreateSession(withCheckpoint(true)))
            {
                var rest = Tokens(f => s.RunPages(3, fromFile, f));
                Check(rest.SequenceEqual(full.Skip(12)), "resumed run sends tokens 12.. exactly");
            }
            var other = withCheckpoint(true);
            other.PagesPerGroup = 3;
            using (var s = model.CreateSession(other))
            {
                var e = Expect<UocrException>(() => s.RunPages(3, fromFile, null), "checkpoint of other parameters");
                Check(e != null && e.Status == Status.InvalidArgument && e.Message.Contains("other parameters"), "mismatch message");
            }
            File.Delete(ckpt);
        }
        Console.WriteLine("C# binding API checks: " + failures + " failures");
        return failures;
    }
}
