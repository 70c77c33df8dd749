"""The tests: folders mirror lab/'s packages; pages/ are AppTest page tests, journeys/ drive headless Chromium."""
