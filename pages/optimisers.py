"""Optimisers: Adam, AdaBelief and Max-AdaBelief on 2-D functions and on the AMSGrad counterexample."""

import streamlit as st

import ui
from lab.view import optimisers as view

ui.scenario_sidebar()
st.title("Optimisers")
st.markdown(view.INTRO.format(measured=ui.badge("measured")))

st.header("2-D playground")
values = ui.form("playground", view.PLAYGROUND_FORM)
with ui.guarded("the playground"), st.spinner("Running the optimisers…"):
    ui.show_all(view.playground(values))

st.header("Adam's counterexample")
st.markdown(view.COUNTEREXAMPLE_INTRO)
values = ui.form("counterexample", view.COUNTEREXAMPLE_FORM)
with ui.guarded("the counterexample"), st.spinner("Running the counterexample…"):
    ui.show_all(view.counterexample(values))
