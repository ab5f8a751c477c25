"""Fourth fresh audit: ``fp8emu.gpu.validate``'s ``limit`` is a positive integer; no case says "ok" about 0 inputs."""

import ml_dtypes
import pytest

from fp8emu.gpu import validate as V


def _case(source, calls):
    def cast(x):
        calls.append(x.size)
        return x.astype(ml_dtypes.float8_e5m2)
    return V.CastCase("ml_dtypes", "e5m2", "ml_dtypes", "rne", source, cast)


@pytest.mark.parametrize("limit", [0, -5, 2.5, "3", True])
def test_a_limit_that_is_no_positive_integer_is_refused_before_any_cast(limit):
    # before: 0 and -5 cast nothing and the case said "ok" with 0 inputs (run() printed the ok row and
    # exit_status said every case matched); 2.5 was truncated to 2, "3" parsed, True read as 1
    calls, printed = [], []
    with pytest.raises(ValueError, match=r"limit must be None \(every pattern\) or a positive integer"):
        V.run([_case("float32", calls)], limit=limit, out=printed.append)
    with pytest.raises(ValueError, match=r"limit must be None"):
        V.check_cast(_case("float32", calls), limit=limit)
    with pytest.raises(ValueError, match=r"limit must be None"):
        next(V.source_chunks("float32", limit))
    assert calls == [] and printed == []


def test_a_positive_limit_shortens_the_float32_sweep_only():
    calls, printed = [], []
    res = V.run([_case("float32", calls), _case("float16", calls)], limit=3, out=printed.append)
    assert [(r.status, r.inputs) for r in res] == [("ok", 3), ("ok", 65536)] and calls == [3, 65536]
    assert V.exit_status(res) == V.EXIT_OK
