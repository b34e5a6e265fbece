"""Test helpers ctxd ships for plugin authors (needs pytest).

:mod:`ctxd_sidecar.testing.store_conformance` holds the store conformance suite.
"""

import pytest

# Plain ``assert`` in the suite then reports values like in a test module.
pytest.register_assert_rewrite("ctxd_sidecar.testing.store_conformance")
