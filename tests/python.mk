# The Python package (python/moeccl) and the example programs (examples/),
# run with /usr/bin/python3 (or $PYTHON) against this build's library;
# each multi-process run is under the launcher's --deadline and `timeout`.
# A test skips (77) only where numpy or torch is absent.

PY_TESTS = \
	tests/test_py_coll.sh \
	tests/test_py_moe.sh \
	tests/test_py_examples.sh

TESTS += $(PY_TESTS)
EXTRA_DIST += $(PY_TESTS) tests/test_py_coll.py tests/test_py_cost.py tests/test_py_moe.py \
	tests/py_env.sh tests/test_py_launch.py python/README.md python/pyproject.toml \
	python/setup.py python/.gitignore python/moeccl/__init__.py python/moeccl/_buffers.py \
	python/moeccl/_lib.py python/moeccl/comm.py python/moeccl/run.py python/moeccl/torch.py

# The C loop that tests/test_py_cost.py times against the binding.
check_LTLIBRARIES = tests/libpy_cost.la
tests_libpy_cost_la_SOURCES = tests/py_cost.c
tests_libpy_cost_la_LIBADD = libmoeccl.la
tests_libpy_cost_la_LDFLAGS = -module -avoid-version -rpath /nowhere
