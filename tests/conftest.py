"""Session-wide test plugins: the real servers integration tests run against; and Hypothesis's
profile: on a developer's machine every run draws new examples (so new bugs turn up there), while
CI (``CI`` set, as .ci/run runs) draws the same examples every time, so a submission is judged on
its code, not on the luck of the draw. A failing example found locally goes into the test as an
``@example``."""

import os

from hypothesis import settings

pytest_plugins = ["tests.infra.pytest_kafka", "tests.infra.pytest_kube"]

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
