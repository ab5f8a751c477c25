"""``te.autocast`` (and ``te.fp8_autocast``) as a decorator, and its calibrating argument (fourteenth audit, part A).

TE's ``autocast`` and ``fp8_autocast`` are ``contextlib.contextmanager`` functions, so TE model code may decorate
a step function with them (``@te.fp8_autocast(enabled=True, fp8_recipe=recipe)``).  Here ``autocast`` is a class
whose instances were context managers only: Python's "TypeError: 'autocast' object is not callable" at the
decoration.  Now the decorated function runs inside the block, each call on its own.  And ``calibrating=0`` (or
None, or "False") was refused as "calibrating=True": the error now gives the value given.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402


def _linear():
    torch.manual_seed(0)
    return te.Linear(64, 64)


def test_a_decorated_function_runs_inside_the_block():
    layer, ref = _linear(), _linear()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))

    @te.autocast(recipe=te.recipe.Float8CurrentScaling(), gpu="b200")
    def step(inp):
        return layer(inp), te.current_autocast()

    y, state = step(x)
    assert state.enabled and state.training.name == "te-current" and state.stack.name == "b200"
    assert te.current_autocast() is None                  # left after the call
    with te.autocast(recipe=te.recipe.Float8CurrentScaling(), gpu="b200"):
        assert torch.equal(y, ref(x))
    assert step.__name__ == "step"


def test_the_deprecated_fp8_autocast_decorates_and_a_recursive_call_nests():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        deco = te.fp8_autocast(enabled=True, fp8_recipe=te.recipe.DelayedScaling())

    @deco
    def depth(n):
        assert te.current_autocast().training.name == "te-delayed"
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(3) == 3 and te.current_autocast() is None


def test_a_decorator_restores_the_outer_block_after_an_error():
    @te.autocast(enabled=False)
    def fails():
        assert te.current_autocast().enabled is False
        raise KeyError("inside")

    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        with pytest.raises(KeyError, match="inside"):
            fails()
        assert te.current_autocast().enabled is True


def test_decorating_something_not_callable_is_one_error():
    with pytest.raises(TypeError, match=r"^autocast: as a decorator it takes a function, got int$"):
        te.autocast()(3)


def test_the_with_statement_is_as_before():
    a = te.autocast(recipe=te.recipe.DelayedScaling())
    with a:
        with pytest.raises(RuntimeError, match="cannot be entered more than once concurrently"):
            a.__enter__()
    assert te.current_autocast() is None


@pytest.mark.parametrize("value", [True, 0, None, "False"])
def test_calibrating_is_reported_as_given(value):
    # 0, None and "False" were reported as "calibrating=True", a value the call did not give
    with pytest.raises(ValueError, match=rf"^autocast: calibrating={value!r} is not emulated \(True: amax statistics "
                                         r"gathered in high precision\); accepted: False$"):
        te.autocast(calibrating=value)
