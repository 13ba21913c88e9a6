"""The Ray executor: the same chunks as the local pool, run as Ray tasks.

Ray comes from the optional ``ray`` extra and is imported only here, when this executor is
chosen. With ``address=None`` a local Ray instance is started (``num_cpus=jobs``) and shut
down afterwards; with an address we connect to that cluster and only disconnect. If Ray is
already initialised in this process, that instance is used and left running.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar

from phaze.executors._common import (
    Chunker,
    Delivery,
    StopSignals,
    TaskError,
    rest_of_chunk,
    run_chunk,
)
from phaze_common.errors import ConfigError

__all__ = ["RaySession", "check_reachable", "import_ray"]

logger = logging.getLogger("phaze.executors")

T = TypeVar("T")
R = TypeVar("R")

_IN_FLIGHT_PER_WORKER: Final[int] = 2  # chunks queued per CPU, hiding Ray's ~ms dispatch
_POLL_S: Final[float] = 1.0  # s; ray.wait wakes at least this often to see a stop request
_CONNECT_TIMEOUT_S: Final[float] = 10.0  # s for the TCP probe of a cluster's address


def import_ray() -> ModuleType:
    """The ``ray`` module, or a ConfigError saying which extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("the ray executor needs the ray extra: pip install 'phaze[ray]'") from exc
    return ray


def check_reachable(address: str, timeout_s: float = _CONNECT_TIMEOUT_S) -> None:
    """Raise a ConfigError unless a TCP connection to ``address`` opens within ``timeout_s``.

    ``ray.init`` retries an unreachable address for many minutes, printing warnings; this
    probe fails in seconds. ``host:port`` and ``ray://host:port`` are probed; names Ray
    resolves itself (``auto``, ``local``) are left to Ray.
    """
    host_port = address.removeprefix("ray://")
    host, sep, port = host_port.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ConfigError(
            f"executor 'ray': cannot reach the Ray cluster at address = {address!r} "
            f"({reason}): start it (`ray start --head`) or give the address it printed"
        ) from None


def _code_search_path() -> list[str]:
    """This process's import path minus the interpreter's own directories.

    Ray workers start with their own ``sys.path``; adding these directories lets workers on
    this machine import whatever the driver can (a source checkout, a test directory), as
    local worker processes do. On other nodes the code must be installed.
    """
    own = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    paths = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.curdir)
        if os.path.isdir(path) and not path.startswith(own) and path not in paths:
            paths.append(path)
    return paths


class RaySession:
    """Ray, opened at the first run that has work and kept until :meth:`close`.

    Opening connects to ``address`` or, with ``address=None``, starts a local instance of
    ``jobs`` CPUs; if Ray is already initialised in this process, that instance is used as
    it is. Closing shuts down only an instance (or connection) opened here.
    """

    name: Final = "ray"

    def __init__(
        self, jobs: int | None, address: str | None, initializer: Callable[[], object] | None
    ) -> None:
        self._jobs = jobs
        self._address = address
        self._initializer = initializer
        self._ray: ModuleType | None = None
        self._opened_here = False
        self._sigterm_handler: Any = None

    @property
    def workers(self) -> int:
        """Chunks run at once: ``jobs``, else the cluster's CPUs (1 before Ray is open)."""
        if self._jobs is not None:
            return self._jobs
        if self._ray is None:
            return 1
        return max(int(self._ray.cluster_resources().get("CPU", 1)), 1)

    def open(self) -> ModuleType:
        """Ray, initialised (idempotent)."""
        if self._ray is not None:
            return self._ray
        ray = import_ray()
        if not ray.is_initialized():
            self._sigterm_handler = signal.getsignal(signal.SIGTERM)
            self._opened_here = True
            # the driver's import path for this job's workers (ignored where it does not exist)
            job_config = ray.job_config.JobConfig(code_search_path=_code_search_path())
            options: dict[str, Any] = {"logging_level": logging.WARNING, "job_config": job_config}
            if self._address is None:
                options["include_dashboard"] = False
                options["num_cpus"] = self._jobs
            if self._address is not None:
                check_reachable(self._address)
            logger.info("starting Ray (address=%s)", self._address or "a new local instance")
            self._ray = ray  # set first, so close() shuts down a half-started instance
            try:
                ray.init(address=self._address, **options)
            except (ConnectionError, ValueError) as exc:
                if self._address is None:
                    raise
                raise ConfigError(
                    f"executor 'ray': cannot connect to address = {self._address!r}: {exc}"
                ) from exc
        self._ray = ray
        return ray

    def close(self, *, abort: bool = False) -> None:
        """Shut down the Ray instance opened here, if any (``abort`` changes nothing)."""
        if self._ray is None:
            return
        if self._opened_here:
            self._ray.shutdown()
            # ray.init installs a SIGTERM handler and shutdown leaves it behind
            main = threading.current_thread() is threading.main_thread()
            if main and signal.getsignal(signal.SIGTERM) is not self._sigterm_handler:
                signal.signal(signal.SIGTERM, self._sigterm_handler)
        self._ray = None
        self._opened_here = False

    def run(self, fn: Callable[[T], R], chunker: Chunker[T], delivery: Delivery[T, R]) -> None:
        """Run every chunk as a Ray task, at most ``2 × workers`` in flight.

        Results stream back in completion order through ``ray.wait``. On an error or a stop
        request, chunks already finished are delivered and the rest (at most two per
        worker) are dropped: :meth:`close` shuts down an instance opened here, workers and
        all, and on a cluster they run out unseen. They are not ``ray.cancel``-ed: Ray 2.60
        can fail a cancelled task locally while its reply is on the way, and then aborts
        the whole driver ("Tried to complete task that was not pending", exit status 1).
        """
        ray = self.open()
        remote = ray.remote(run_chunk).options(num_cpus=1)
        fn_ref = ray.put(fn)
        init_ref = ray.put(self._initializer)
        limit = self.workers * _IN_FLIGHT_PER_WORKER
        in_flight: dict[Any, tuple[T, ...]] = {}

        def submit(chunk: tuple[T, ...]) -> None:
            in_flight[remote.remote(fn_ref, chunk, init_ref)] = chunk

        with StopSignals() as stop:
            try:
                _ray_loop(ray, submit, chunker, delivery, limit, in_flight, stop)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt | TaskError):
                    with stop.deferred():
                        _drain(ray, in_flight, delivery)
                raise


def _ray_loop(
    ray: ModuleType,
    submit: Callable[[tuple[T, ...]], None],
    chunker: Chunker[T],
    delivery: Delivery[T, R],
    limit: int,
    in_flight: dict[Any, tuple[T, ...]],
    stop: StopSignals,
) -> None:
    exhausted = False
    while True:
        with stop.deferred():
            while not exhausted and len(in_flight) < limit:
                chunk = chunker.take()
                if not chunk:
                    exhausted = True
                    break
                submit(chunk)
        if not in_flight:
            return
        stop.check()  # a signal deferred while submitting; later ones raise in ray.wait()
        done, _ = ray.wait(list(in_flight), num_returns=1, timeout=_POLL_S)
        if done:
            done, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=0)
        with stop.deferred(), stop.stop_wins():
            for ref in done:
                chunk = in_flight.pop(ref)
                delivery.deliver(chunk, _get(ray, ref, chunk))
        stop.check()


def _get(ray: ModuleType, ref: Any, chunk: tuple[T, ...]) -> Any:
    """A finished chunk's outcome; Ray's own failures (a worker lost) name the chunk."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        extra = rest_of_chunk(len(chunk))
        raise TaskError(chunk[0], f"Ray could not run it{extra}: {exc}") from exc


def _drain(ray: ModuleType, in_flight: dict[Any, tuple[T, ...]], delivery: Delivery) -> None:
    """Deliver chunks that already finished, without waiting for running ones."""
    if not in_flight:
        return
    done, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=0)
    for ref in done:
        chunk = in_flight.pop(ref)
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayError:
            continue
        delivery.deliver(chunk, outcome, raise_failure=False)
