"""Test helpers ctxd ships for plugin authors (needs pytest).

:mod:`sidecar.testing.store_conformance` holds the store conformance suite.
"""

import pytest

# Plain ``assert`` in the suite then reports values like in a test module.
pytest.register_assert_rewrite("sidecar.testing.store_conformance")
