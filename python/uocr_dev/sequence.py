"""The demo model's decoder sequences, shared by training (train), decoding (infer), evaluation
(eval) and the sample pages (make_samples): the prompt before the generated text, and the target
text of a document of one or several pages.
"""
from uocr_dev.tokenizer import PAGE_MARK, PROMPT_MULTI, PROMPT_SINGLE


def prompt_ids(tok, n_pages, tokens_per_page):
    """[BOS] + an `<image>` id per visual token of every page + the prompt text (one page or several)."""
    text = PROMPT_SINGLE if n_pages == 1 else PROMPT_MULTI
    return [tok.bos] + [tok.image] * (tokens_per_page * n_pages) + tok.encode(text)


def join_pages(mds):
    """Decoder target text for a document and the offset of each page's markdown in it."""
    if len(mds) == 1:
        return mds[0], [0]
    out, offs = "", []
    for md in mds:
        out += PAGE_MARK
        offs.append(len(out))
        out += md
    return out, offs
