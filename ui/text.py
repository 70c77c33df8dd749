"""The one place user text (names, a link's values, messages that quote them) becomes safe text for anything
Streamlit renders as Markdown."""

from __future__ import annotations

import re

_WJ = "\u2060"  # word joiner: invisible, and it breaks the patterns Markdown turns into links by itself


def plain(text: str) -> str:
    """User text shown as text in anything Streamlit renders as Markdown (st.markdown, st.caption,
    st.error/warning/info/success, st.toast, st.expander and st.tabs labels, widget labels, metric
    labels): escape Markdown and HTML special characters (``&`` too, so that ``&lt;`` stays five
    characters), and break the bare addresses (``http://``, ``www.``, ``name@host``) that
    Streamlit's Markdown would turn into live links even when every special character is escaped."""
    text = re.sub(r"(?i)(?<=[a-z]):(?=//)", ":" + _WJ, str(text))
    text = re.sub(r"(?i)\b(www)\.", r"\1" + _WJ + ".", text).replace("@", _WJ + "@")
    out = []
    for ch in text:
        if ch in "\\`*_{}[]()#+-.!|<>~$:&":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
