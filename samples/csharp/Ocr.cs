// ocr: transcribes a document of page images through the uocr C ABI (the P/Invoke binding,
// bindings/csharp/Uocr.cs). From the repository root, with libuocr.so built in BUILD/c_api:
//
//   mcs -out:ocr.exe bindings/csharp/Uocr.cs samples/csharp/Ocr.cs
//   LD_LIBRARY_PATH=BUILD/c_api mono ocr.exe [-n MAX_NEW_TOKENS] [-q] [--pages-per-group G]
//       [--page-fallback-tokens N] MODEL_DIR IMAGE...
//
// Prints the transcript and a newline on stdout (the library's exact bytes); the token stream
// and a summary go to stderr unless -q. Each page is read here when the session asks for it
// and handed over as encoded bytes (Session.RunPages), so a document of any length runs with
// G pages in memory.
using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

static class Ocr
{
    static int Usage()
    {
        Console.Error.WriteLine("usage: ocr.exe [-n MAX_NEW_TOKENS] [-q] [--pages-per-group G] [--page-fallback-tokens N] MODEL_DIR IMAGE...");
        return 2;
    }

    static int Main(string[] argv)
    {
        var args = new List<string>(argv);
        var options = new Uocr.SessionOptions();
        bool quiet = false;
        while (args.Count > 0 && args[0].StartsWith("-"))
        {
            if (args[0] == "-q") { quiet = true; args.RemoveAt(0); continue; }
            int value;
            if (args.Count < 2 || !int.TryParse(args[1], out value)) return Usage();
            if (args[0] == "-n") options.MaxNewTokens = value;
            else if (args[0] == "--pages-per-group") options.PagesPerGroup = value;
            else if (args[0] == "--page-fallback-tokens") options.PageFallbackTokens = value;
            else return Usage();
            args.RemoveRange(0, 2);
        }
        if (args.Count < 2) return Usage();
        var stderr = Console.OpenStandardError();
        try
        {
            long tokens = 0;
            Uocr.RunSummary summary;
            byte[] text;
            using (var model = new Uocr.Model(args[0]))
            using (var session = model.CreateSession(options))
            {
                summary = session.RunPages(args.Count - 1, i => Uocr.Page.Encoded(File.ReadAllBytes(args[1 + (int)i])), e =>
                {
                    if (e.Type == Uocr.EventType.Token)
                    {
                        ++tokens;
                        if (!quiet) stderr.Write(e.Text, 0, e.Text.Length);
                    }
                    else if (e.Type == Uocr.EventType.Block && !quiet)
                    {
                        Console.Error.WriteLine("\n[page {0} block {1}: {2} px]", e.Page, e.Label, string.Join(",", e.BoxPx));
                    }
                    return true;  // false would cancel
                });
                text = session.Text();
            }
            if (tokens != summary.GeneratedTokens)
            {
                Console.Error.WriteLine("ocr.exe: {0} token events but {1} generated tokens", tokens, summary.GeneratedTokens);
                return 1;
            }
            using (var stdout = Console.OpenStandardOutput())
            {
                stdout.Write(text, 0, text.Length);
                stdout.WriteByte((byte)'\n');
                stdout.Flush();
            }
            if (!quiet)
                Console.Error.WriteLine("\n{0} pages, {1} generated tokens (stop: {2}), vision {3:F2} s, decode {4:F2} s, peak memory {5} bytes",
                    summary.Pages, summary.GeneratedTokens, Uocr.Library.StopReasonName(summary.StopReason),
                    summary.VisionSeconds, summary.DecodeSeconds, summary.PeakBytes);
            return 0;
        }
        catch (Uocr.UocrException e)
        {
            Console.Error.WriteLine("ocr.exe: " + e.Message);
            return 1;
        }
        catch (IOException e)
        {
            Console.Error.WriteLine("ocr.exe: " + e.Message);
            return 1;
        }
    }
}
