"""Prepare the next items of an iterator in a background thread while the current one is used.

The training loop uses it so that decoding JPEGs (lazy on-disk datasets) and augmenting the next
batch overlap with the forward/backward pass of the current one. One producer thread pulls the
source in order, so anything the source draws from a seeded generator (the sampler's numpy RNG,
the augmentation's ``torch.Generator``) is drawn in exactly the order of the synchronous loop and
the items are bit-identical to it.

Threads rather than processes: the expensive parts (PIL decoding, torch kernels) release the GIL,
and a thread shares the generators, so nothing has to be pickled or re-seeded.
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

#: How long :meth:`Prefetcher.close` waits for the producer to finish the item it is preparing.
#: The producer checks for a stop request only between items, so the wait is at most one item
#: (one batch); the bound only guards against a source that never returns.
CLOSE_TIMEOUT_S = 60.0


@dataclass
class _Failure:
    """An exception raised by the source, carried to the consumer (with its traceback)."""

    error: BaseException


class _End:
    """The source is exhausted."""


_END = _End()


class Prefetcher(Generic[T], Iterator[T]):
    """Iterate ``source`` in order, with up to ``depth`` items prepared ahead in one thread.

    ``depth`` counts the items taken from the source but not yet handed to the consumer, including
    the one being prepared: with ``depth = 1`` the next item is prepared while the current one is
    used (double buffering). ``depth = 0`` iterates the source synchronously in the caller's
    thread, with no thread at all (a switch for comparisons and debugging).

    An exception raised by the source is re-raised by ``next()`` at the position of the item that
    failed, as the same exception object, so its traceback still shows where the source raised.
    Use it as a context manager (or call :meth:`close`) so that a consumer that stops early (a
    ``break``, an exception, KeyboardInterrupt) stops the thread: the producer stops before its
    next item, closes the source if it is a generator, and is joined.
    """

    def __init__(self, source: Iterable[T], depth: int = 2, *, name: str = "prefetch") -> None:
        if depth < 0:
            raise ValueError(f"depth must be non-negative, got {depth}")
        self.depth = depth
        self._source = iter(source)
        self._finished = False
        self._thread: threading.Thread | None = None
        if depth == 0:
            return
        self._queue: queue.SimpleQueue[T | _Failure | _End] = queue.SimpleQueue()
        # One permit per item the producer may prepare ahead; the consumer returns one per item taken.
        self._slots = threading.Semaphore(depth)
        self._stop = threading.Event()
        # Daemon, so that a source stuck forever cannot keep the interpreter from exiting. The
        # thread gets the queue, permits and source but not `self`, so an abandoned Prefetcher can
        # still be collected (and its __del__ stop the thread).
        self._thread = threading.Thread(
            target=_produce,
            args=(self._source, self._queue, self._slots, self._stop),
            name=f"dmlbench-{name}",
            daemon=True,
        )
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The producer thread (None with ``depth = 0``)."""
        return self._thread

    def __iter__(self) -> Prefetcher[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        if self._thread is None:
            try:
                return next(self._source)
            except BaseException:
                self._finished = True
                raise
        item = self._queue.get()
        if isinstance(item, _End):
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            # The same object: its __traceback__ keeps the source's frames, this frame is added on top.
            raise item.error
        self._slots.release()
        return item

    def close(self) -> None:
        """Stop the producer and wait (bounded) for it; idempotent. Unconsumed items are dropped."""
        self._finished = True
        thread = self._thread
        if thread is None:
            _close_source(self._source)
            return
        self._stop.set()
        # Wake a producer waiting for a permit, so that it sees the stop request.
        self._slots.release()
        if thread is threading.current_thread():
            return  # closed from the source itself: the thread ends when the source returns
        thread.join(CLOSE_TIMEOUT_S)
        if thread.is_alive():
            warnings.warn(
                f"Prefetch thread {thread.name} did not stop within {CLOSE_TIMEOUT_S:.0f}s; "
                "it is a daemon thread and is left to finish on its own.",
                ResourceWarning,
                stacklevel=2,
            )
        # Drop prepared items now rather than with the Prefetcher (they may be large batches).
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Safety net for a Prefetcher dropped without close(): stop the producer, do not wait for it
        # (joining from a finaliser could block whatever thread happens to run the collection).
        if getattr(self, "_thread", None) is not None and not self._finished:
            self._finished = True
            self._stop.set()
            self._slots.release()


def _produce(
    source: Iterator[T],
    out: queue.SimpleQueue[T | _Failure | _End],
    slots: threading.Semaphore,
    stop: threading.Event,
) -> None:
    """The producer thread: one item per permit, in order, until exhausted, failed or stopped."""
    try:
        while True:
            slots.acquire()
            if stop.is_set():
                return
            try:
                item = next(source)
            except StopIteration:
                out.put(_END)
                return
            except BaseException as error:  # everything goes to the consumer
                out.put(_Failure(error))
                return
            out.put(item)
    finally:
        # Run the source's own clean-up (a generator's finally blocks) in the thread that ran it:
        # a generator cannot be closed from another thread while it might be executing.
        _close_source(source)


def _close_source(source: Iterator[object]) -> None:
    close = getattr(source, "close", None)
    if callable(close):
        try:
            close()
        except Exception as error:  # clean-up must not mask the consumer's exception
            warnings.warn(f"Closing the prefetch source failed: {error!r}", RuntimeWarning, stacklevel=2)
