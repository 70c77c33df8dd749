"""About the designs: the four published designs the lab is built from, their claims, and where each is tested."""

import streamlit as st

import ui
from lab.view import about as view

ui.scenario_sidebar()
st.title("About the designs")
st.markdown(view.INTRO.format(modelled=ui.badge("modelled"), measured=ui.badge("measured")))

designs = [view.Design(t, s, tuple(view.Claim(c, p, h, None) for c, p, h, *_ in claims))
           for t, s, claims in view.DESIGNS]  # shown without the measured sentences if the runs cannot be read
with ui.guarded("reading the runs"):
    designs = view.page()
for design in designs:
    with st.container(border=True):
        st.subheader(design.title)
        st.markdown(design.summary)
        for c in design.claims:
            st.markdown(f"**Claim:** “{c.claim}”  \n*Where the lab tests it:* {c.how}.")
            if c.measured:
                st.markdown(f"{ui.badge('measured')} {ui.plain(c.measured)}")
            st.page_link(c.page, label=f"Open {view.TITLES[c.page]}", icon=":material/science:")

st.header(view.GLOSSARY_HEAD)
st.caption(view.GLOSSARY_INTRO)
for term, meaning in view.GLOSSARY:  # the lab's own words, shown as text all the same
    st.markdown(f"**{ui.plain(term)}**: {ui.plain(meaning)}")
