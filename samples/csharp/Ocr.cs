// ocr: transcribes page images through the uocr C ABI (P/Invoke binding in Uocr.cs).
//
//   mono ocr.exe [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...
//
// Prints the transcript and a newline on stdout (the library's exact bytes); the token stream
// and a summary go to stderr unless -q. Pages are read here and passed as encoded bytes
// (uocr_session_add_image_encoded).
using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

static class Ocr
{
    static int Main(string[] argv)
    {
        var args = new List<string>(argv);
        var options = new Uocr.SessionOptions();
        bool quiet = false;
        while (args.Count > 0 && args[0].StartsWith("-"))
        {
            if (args[0] == "-n" && args.Count > 1) { options.MaxNewTokens = long.Parse(args[1]); args.RemoveRange(0, 2); }
            else if (args[0] == "-q") { quiet = true; args.RemoveAt(0); }
            else break;
        }
        if (args.Count < 2)
        {
            Console.Error.WriteLine("usage: ocr.exe [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...");
            return 2;
        }
        var stderr = Console.OpenStandardError();
        try
        {
            long tokens = 0;
            Uocr.RunSummary summary;
            byte[] text;
            using (var model = new Uocr.Model(args[0]))
            using (var session = model.CreateSession(options))
            {
                for (int i = 1; i < args.Count; ++i) session.AddImageEncoded(File.ReadAllBytes(args[i]));
                summary = session.Run(e =>
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
                Console.Error.WriteLine("\n{0} pages, {1} generated tokens (stop: {2}), vision {3:F2} s, decode {4:F2} s",
                    summary.Pages, summary.GeneratedTokens, Uocr.Library.StopReasonName(summary.StopReason),
                    summary.VisionSeconds, summary.DecodeSeconds);
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
