"""optimizer.step() as the recording's step boundary, seen once the step has returned.

torch runs every optimizer's step inside `record_function("Optimizer.step#…")`, and its step hooks
(register_optimizer_step_post_hook) run inside that block too. Stopping one profiler and starting the
next there (the whole-run recording handing over to the scheduled one, the schedule moving on) leaves
that record function open across the change: when it closes, torch ends it with the new profiler's
callbacks and the old one's freed context, which crashed the process now and then (a segfault or an
abort, often in a later garbage collection). So the boundary is taken after the block: each optimizer
class's step, as torch wraps it (Optimizer.profile_hook_step), is wrapped once more, and the callback
runs when the step and its record function are over.

`AfterStep(callback).install()` wraps the classes already wrapped by torch and those it wraps while
installed (through the wrapper factory); `remove()` puts torch's own wrappers back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

_INNER = "_traceana_inner"


def _classes(root: type) -> Iterator[type]:
    seen: set[type] = set()
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        yield cls
        todo.extend(cls.__subclasses__())


class AfterStep:
    """Call `callback(optimizer)` after each optimizer step, outside torch's record function."""

    def __init__(self, callback: Callable[[Any], None]) -> None:
        self.callback = callback
        self._factory: Any = None
        self._post: Any = None  # the step hook, on a torch without Optimizer.profile_hook_step
        self.active = False

    def _outer(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(inner)
        def step(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            if self.active and args:
                self.callback(args[0])
            return out

        setattr(step, _INNER, inner)
        return step

    def install(self) -> None:
        from torch.optim.optimizer import Optimizer

        factory_of_torch = Optimizer.__dict__.get("profile_hook_step")  # torch's staticmethod
        if not isinstance(factory_of_torch, staticmethod):  # a torch that wraps steps some other way:
            from torch.optim.optimizer import register_optimizer_step_post_hook  # its hook, as before

            self._post = register_optimizer_step_post_hook(lambda opt, args, kwargs: self.callback(opt))
            self.active = True
            return
        self._factory = factory_of_torch
        real = self._factory.__func__

        def factory(func: Callable[..., Any]) -> Callable[..., Any]:
            return self._outer(real(func))

        Optimizer.profile_hook_step = staticmethod(factory)
        for cls in _classes(Optimizer):
            step = cls.__dict__.get("step")
            if step is not None and getattr(step, "hooked", False) and not hasattr(step, _INNER):
                cls.step = self._outer(step)
        self.active = True

    def remove(self) -> None:
        self.active = False
        if self._post is not None:
            self._post.remove()
            self._post = None
        if self._factory is None:
            return
        from torch.optim.optimizer import Optimizer

        self.active = False
        Optimizer.profile_hook_step = self._factory
        self._factory = None
        for cls in _classes(Optimizer):
            inner = getattr(cls.__dict__.get("step"), _INNER, None)
            if inner is not None:
                inner.hooked = True  # torch marks the outermost wrapper; without it the class is wrapped again
                cls.step = inner
