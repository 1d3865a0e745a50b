"""The UI's routes: each parses its request, calls one page function in a worker thread, answers.

Store calls run one at a time (``UiApp.lock``): a restore must not interleave with a page that
reads the tree.  Pages hold the lock only for each Store call (:mod:`snapstore.ui.locked`), never
while they render, and render within a :class:`~snapstore.ui.budget.Budget`; so a page busy with
a huge diff holds back no other page.  An action (restore, undo, tag) holds the lock from its
check to its act, so a confirmed plan is the plan carried out.  Nothing from a request reaches the file
system but through Store methods (paths travel as tokens of their bytes, see
:func:`snapstore.ui.html.path_token`, and go to ``read_bytes``, ``history``, ``restore``...).
Static files are a fixed set read from the package.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote

from snapstore.errors import (
    ConflictError,
    LockedError,
    RefError,
    SnapstoreError,
    StoreNotFoundError,
    UnsafePathError,
    UsageError,
)
from snapstore.ui import actions, budget, filediff, here, preview, revert, since, timeline, views
from snapstore.ui.assets import assets, headers_for
from snapstore.ui.download import stream
from snapstore.ui.html import Html, error_body, fmt, page, path_from_token, read_only_banner, url
from snapstore.ui.images import HEADERS as IMAGE_HEADERS
from snapstore.ui.images import image_type
from snapstore.ui.locked import locked
from snapstore.ui.security import AdmitPeer, Credentials, Guard, allowed_hosts

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from snapstore.store import Store

T = TypeVar("T")
#: Fragments rendered at the same time (the others wait their turn in their worker thread).
FRAGMENTS_AT_ONCE = 2
#: The largest form body accepted (a restore of many selected paths fits easily).
MAX_FORM = 4 * 1024 * 1024

STATUS = [
    (RefError, 404),
    (StoreNotFoundError, 404),
    (UsageError, 400),
    (UnsafePathError, 400),
    (ConflictError, 409),
    (LockedError, 503),
]


def _status(exc: SnapstoreError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


class UiApp:
    """The page handlers around one open Store (``read_only``: pages without a working tree or
    any form that changes something, and a banner naming ``remote``, what is shown)."""

    def __init__(self, store: Store, *, read_only: bool = False, remote: str | None = None):
        self.store = store
        self.lock = threading.RLock()
        #: what reading pages use: each Store call under the lock, the rest outside it
        self.reader = locked(store, self.lock)
        self.read_only = read_only
        self.remote = remote
        self.banner = read_only_banner(remote) if read_only else Html("")
        self.root = f"remote {remote} (read-only)" if read_only and remote else store.root
        self.static = assets()
        #: fragments (diffs loaded as they scroll into view) rendered at once, over every reader:
        #: a page's first byte then competes with two of them, not with every open page's
        self.fragments = threading.BoundedSemaphore(FRAGMENTS_AT_ONCE)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a worker thread, one at a time."""
        from starlette.concurrency import run_in_threadpool

        def locked() -> T:
            with self.lock:
                return fn()

        return await run_in_threadpool(locked)

    async def page(self, fn: Callable[[], tuple[str, Html]], active: str = "", *, act: bool = False) -> Response:
        """A whole page from ``fn() -> (title, body)``; a Store error becomes an error page.

        ``fn`` runs in a worker thread: holding the lock throughout when it acts (``act``),
        otherwise free, its Store calls made through :attr:`reader`.
        """
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        def build() -> tuple[str, Html, str]:
            title, body = fn()
            return title, body, self.reader.revision()

        if self.vanished():
            return self.gone()
        try:
            title, body, revision = await (self.run(build) if act else run_in_threadpool(build))
        except SnapstoreError as exc:
            return self.error_page(exc)
        except Exception as exc:  # a bug: say so in one line, keep the server up
            print(f"snapstore ui: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            body = error_body(500, f"internal error: {type(exc).__name__} (see the terminal running snapstore ui)")
            return HTMLResponse(page("Error 500", body, root=self.root, banner=self.banner), status_code=500)
        return HTMLResponse(page(title, body, active=active, root=self.root, revision=revision, banner=self.banner))

    def vanished(self) -> bool:
        """Whether the store's directory is gone (deleted or moved while this browser runs)."""
        where = self.store.store_dir
        return where is not None and not self.read_only and not os.path.isdir(where)

    def gone(self) -> Response:
        """The page of a store that vanished: what happened and what to do, not a stale page."""
        return self.status_page(
            410, f"the store at {self.store.store_dir} is gone: its directory was deleted or moved while this browser "
            "was open. Nothing more can be shown or restored from it; stop snapstore ui (Ctrl-C) and start it where "
            "the store is now (or run 'snapstore init' for a new one).",
        )

    def error_page(self, exc: SnapstoreError) -> Response:
        """The page for a Store error (its one-line message, the status its class maps to)."""
        return self.status_page(_status(exc), exc.message)

    def status_page(self, status: int, message: str) -> Response:
        """The error page: ``message`` (one line) under ``Error <status>``."""
        from starlette.responses import HTMLResponse

        html = page(f"Error {status}", error_body(status, message), root=self.root, banner=self.banner)
        return HTMLResponse(html, status_code=status)

    # -- reading -------------------------------------------------------------------------------

    async def timeline(self, request: Request) -> Response:
        f, before = _filters(request)

        def build() -> tuple[str, Html]:
            if before is None and f == timeline.Filters() and not self.reader.log_page(limit=1, include_safety=True)[0]:
                return views.empty_store()
            return timeline.timeline(self.reader, f, before, read_only=self.read_only)

        return await self.page(build, "timeline")

    async def timeline_fragment(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        f, before = _filters(request)
        try:
            html = await run_in_threadpool(lambda: timeline.timeline_list(self.reader, f, before, read_only=self.read_only))
        except SnapstoreError as exc:
            return HTMLResponse(error_body(_status(exc), exc.message), status_code=_status(exc))
        return HTMLResponse(html)

    async def prompts(self, request: Request) -> Response:
        """``{checkpoint id: prompt}`` for the rows of a timeline page (read after its paint)."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        f, before = _filters(request)
        try:
            found = await run_in_threadpool(lambda: timeline.prompts(self.reader, f, before))
        except SnapstoreError as exc:
            return JSONResponse({"error": exc.message}, status_code=_status(exc))
        return JSONResponse(found)

    async def here(self, request: Request) -> Response:
        """The working tree's row of the timeline (it walks the tree: loaded after the page)."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        if self.read_only:
            return self.status_page(404, "this browser is read-only: it has no working tree")
        try:
            html = await run_in_threadpool(lambda: here.row(self.reader))
        except SnapstoreError as exc:
            return HTMLResponse(error_body(_status(exc), exc.message), status_code=_status(exc))
        return HTMLResponse(html)

    async def revision(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if self.vanished():
            return JSONResponse({"error": "the store is gone"}, status_code=410)
        return JSONResponse({"revision": await self.run(self.reader.revision)})

    async def checkpoint(self, request: Request) -> Response:
        ref, view, only, ctx = request.path_params["cid"], _view(request), _path(request), _context(request)
        b = budget.for_request(_full(request))
        if only is not None and request.query_params.get("frag") == "1":
            return await self.fragment(lambda: views.checkpoint_diff(self.reader, ref, view, only, b, ctx))
        q = request.query_params
        done = f"Tagged this checkpoint #{q['tagged']}." if q.get("tagged") else ""
        done = f"Removed the tag #{q['untagged']}." if q.get("untagged") else done
        notice = fmt('<p class="done" role="status">{}</p>', done) if done else None
        return await self.page(
            lambda: views.checkpoint(self.reader, ref, view, only, b, read_only=self.read_only, context=ctx, notice=notice),
        )

    async def fragment(self, fn: Callable[[], Html]) -> Response:
        """A piece of a page (one file's diff, loaded as it scrolls into view), or its error note."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        def render() -> Html:
            with self.fragments:
                return fn()

        try:
            html = await run_in_threadpool(render)
        except SnapstoreError as exc:
            status = _status(exc)
            return HTMLResponse(fmt('<p class="note error" role="alert">{}</p>', exc.message), status_code=status)
        return HTMLResponse(html)

    async def towards(self, request: Request) -> Response:
        """One path's diff from the working tree to a checkpoint (a restore preview's row, when opened)."""
        if self.read_only:
            return self.status_page(404, "this browser is read-only: it has no working tree")
        ref, path = request.path_params["cid"], _path(request) or b""
        return await self.fragment(lambda: preview.towards(self.reader, self.reader.resolve(ref).id, path))

    async def image(self, request: Request) -> Response:
        """A stored file as an image, when its bytes are one (PNG, JPEG, GIF, WebP): the type
        from its signature, a policy that lets it run nothing."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import PlainTextResponse, Response

        ref, path = request.path_params["cid"], _path(request) or b""
        try:
            data = await run_in_threadpool(lambda: views.image_bytes(self.reader, ref, path))
        except SnapstoreError as exc:
            return PlainTextResponse(exc.message, status_code=_status(exc))
        kind = image_type(data)
        if kind is None:
            return PlainTextResponse("not an image this page shows (PNG, JPEG, GIF, WebP)", status_code=415)
        return Response(data, media_type=kind, headers=IMAGE_HEADERS)

    async def file(self, request: Request) -> Response:
        ref, path = request.path_params["cid"], _path(request) or b""
        b = budget.for_request(_full(request))
        return await self.page(lambda: views.file_at(self.reader, ref, path, b, read_only=self.read_only))

    async def raw(self, request: Request) -> Response:
        """A file's bytes as an attachment, streamed (the store's size in Content-Length)."""
        from starlette.responses import StreamingResponse

        ref, path = request.path_params["cid"], _path(request) or b""
        name = path.rsplit(b"/", 1)[-1].decode("utf-8", "replace") or "file"
        try:
            info = await self.run(lambda: self.store.file_info(ref, path))  # errors before any byte
        except SnapstoreError as exc:
            return self.error_page(exc)
        if "hash" not in info:
            return self.error_page(RefError(f"{info['path']} is not a file in that checkpoint"))
        cid = info["checkpoint"]
        headers = {"content-disposition": _attachment(name), "content-length": str(info["size"])}
        body = stream(lambda: self.store.iter_bytes(cid, path))
        return StreamingResponse(body, media_type="application/octet-stream", headers=headers)

    async def conversation(self, request: Request) -> Response:
        ref = request.path_params["cid"]
        return await self.download(lambda: actions.conversation_json(self.store, ref), "application/json")

    async def download(self, fn: Callable[[], tuple[str, bytes]], media_type: str) -> Response:
        """An attachment (never rendered by the browser), or the error page."""
        from starlette.responses import Response

        try:
            name, data = await self.run(fn)
        except SnapstoreError as exc:
            return self.error_page(exc)
        return Response(data, media_type=media_type, headers={"content-disposition": _attachment(name)})

    async def history(self, request: Request) -> Response:
        path = _path(request)
        return await self.page(lambda: views.history(self.reader, path))

    async def compare(self, request: Request) -> Response:
        q = request.query_params
        a, b, view, only = q.get("a", "").strip(), q.get("b", "").strip(), _view(request), _path(request)
        cap, ctx = budget.for_request(_full(request)), _context(request)
        if only is not None and a and q.get("frag") == "1":
            return await self.fragment(lambda: views.compare_diff(self.reader, a, b, view, only, cap, ctx))
        return await self.page(
            lambda: views.compare(self.reader, a, b, view, only, cap, read_only=self.read_only, context=ctx), "compare",
        )

    async def operations(self, request: Request) -> Response:
        return await self.page(lambda: views.operations(self.reader, read_only=self.read_only), "ops")

    async def static_file(self, request: Request) -> Response:
        """A static file: gzipped when the browser takes it, cached by its content's version."""
        from starlette.responses import PlainTextResponse, Response

        found = self.static.get(request.path_params["name"])
        if found is None:
            return PlainTextResponse("not found", status_code=404)
        versioned = request.query_params.get("v") == found.version
        gzipped = "gzip" in request.headers.get("accept-encoding", "").lower()
        headers = headers_for(found, versioned=versioned, gzipped=gzipped)
        if request.headers.get("if-none-match") == found.etag:
            headers.pop("content-encoding", None)
            return Response(status_code=304, headers=headers)
        return Response(found.gzipped if gzipped else found.data, media_type=found.media_type, headers=headers)

    # -- changing (POST only; security.Guard checked the Origin) -------------------------------

    async def refused(self, request: Request) -> Response:
        """What every change route answers in a read-only browser (nothing is called)."""
        where = f"the remote {self.remote}" if self.remote else "this store"
        return self.status_page(
            403, f"this browser is read-only: {where} cannot be restored, undone, reverted or tagged from here "
            "(fetch or pull it into your own store first)",
        )

    async def restore_preview(self, request: Request) -> Response:
        ref, form = request.path_params["cid"], await _form(request)
        paths = _form_paths(form)
        rewind = _one(form, "rewind") == "1"
        return await self.page(lambda: actions.restore_preview(self.store, ref, paths, rewind=rewind), act=True)

    async def restore(self, request: Request) -> Response:
        ref, form = request.path_params["cid"], await _form(request)
        paths, plan, confirm = _form_paths(form), _one(form, "plan"), _one(form, "confirm")
        rewind = _one(form, "rewind") == "1"
        return await self.page(lambda: actions.restore_confirm(self.store, ref, paths, plan, confirm, rewind), act=True)

    async def revert_preview(self, request: Request) -> Response:
        ref, form = request.path_params.get("cid", ""), await _form(request)
        return await self.page(lambda: revert.preview(self.store, _scope(ref, form)), act=True)

    async def revert_confirm(self, request: Request) -> Response:
        ref, form = request.path_params.get("cid", ""), await _form(request)
        plan, confirm, choices = _one(form, "plan"), _one(form, "confirm"), _choices(form)
        return await self.page(lambda: revert.confirm(self.store, _scope(ref, form), plan, confirm, choices), act=True)

    async def range_page(self, request: Request) -> Response:
        """A range of the timeline, one actor's changes in it combined (``/range``)."""
        q = request.query_params
        picks = [v for k, v in q.multi_items() if k == "pick" and v]
        start, end, since_, actor = q.get("start", ""), q.get("end", ""), q.get("since", ""), q.get("actor", "")
        view, cap = _view(request), budget.for_request(_full(request))

        def build() -> tuple[str, Html]:
            r = since.pick(self.reader, start, end, since_, picks, actor)
            return since.page(self.reader, r, view, cap, read_only=self.read_only)

        return await self.page(build)

    async def undo_preview(self, request: Request) -> Response:
        await _form(request)
        return await self.page(lambda: actions.undo_preview(self.store), "ops", act=True)

    async def undo(self, request: Request) -> Response:
        form = await _form(request)
        plan, confirm = _one(form, "plan"), _one(form, "confirm")
        return await self.page(lambda: actions.undo_confirm(self.store, plan, confirm), "ops", act=True)

    async def tag(self, request: Request) -> Response:
        ref, form = request.path_params["cid"], await _form(request)
        name = _one(form, "name").strip()
        return await self.after_change(ref, lambda: actions.tag(self.store, ref, name), tagged=name)

    async def untag(self, request: Request) -> Response:
        ref, form = request.path_params["cid"], await _form(request)
        name = _one(form, "name")
        return await self.after_change(ref, lambda: actions.untag(self.store, name), untagged=name)

    async def after_change(self, ref: str, fn: Callable[[], str], **done: str) -> Response:
        """Run a change that needs no preview, then go back to the checkpoint (POST-redirect-GET)
        saying what it did; a refusal is said on the checkpoint's own page, above its record."""
        from starlette.responses import HTMLResponse, RedirectResponse

        try:
            await self.run(fn)
        except SnapstoreError as exc:
            notice = fmt('<p class="error" role="alert">Not done: {}</p>', exc.message)
            response = await self.page(lambda: views.checkpoint(self.reader, ref, "unified", notice=notice))
            if isinstance(response, HTMLResponse) and response.status_code == 200:
                response.status_code = _status(exc)
            return response
        return RedirectResponse(url(f"/c/{quote(ref, safe='')}", **done), status_code=303)


def _filters(request: Request) -> tuple[timeline.Filters, int | None]:
    """The timeline's filters and its page (``before``: the log number its rows are below)."""
    q = request.query_params
    f = timeline.Filters(
        q=q.get("q", "").strip(),
        path=q.get("path", "").strip(),
        said=q.get("said", "").strip(),
        task=q.get("task", "").strip(),
        tag=q.get("tag", "").strip(),
        safety=q.get("safety", "") == "1",
        actor=q.get("actor", "").strip() if q.get("actor", "").strip() in since.ACTORS else "",
    )
    try:
        before = max(0, int(q["before"])) if q.get("before") else None
    except ValueError:
        before = None  # a mangled cursor: the first page
    return f, before


def _full(request: Request) -> bool:
    """Whether the reader asked to see a large diff or file anyway (the larger limits)."""
    return request.query_params.get("full") == "1"


def _attachment(name: str) -> str:
    return f"attachment; filename*=UTF-8''{quote(name, safe='')}"


def _context(request: Request) -> int:
    """Lines of context asked for (``ctx``), one of :data:`filediff.CONTEXTS`."""
    try:
        asked = int(request.query_params.get("ctx", ""))
    except ValueError:
        return filediff.CONTEXTS[0]
    return max((n for n in filediff.CONTEXTS if n <= asked), default=filediff.CONTEXTS[0])


def _view(request: Request) -> str:
    return "split" if request.query_params.get("view") == "split" else "unified"


def _path(request: Request) -> bytes | None:
    """The path a request names: ``p`` (a token of its bytes, from links) or ``path`` (typed)."""
    q = request.query_params
    if q.get("p"):
        return path_from_token(q["p"])
    if q.get("path", "").strip():
        return q["path"].strip().encode("utf-8", "surrogateescape")
    return None


async def _form(request: Request) -> list[tuple[str, str]]:
    """The fields of an urlencoded form body (no multipart: no extra dependency, no files)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = b""
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_FORM:
            raise _TooLarge()
    if body and kind != "application/x-www-form-urlencoded":
        raise _BadForm()
    return parse_qsl(body.decode("latin-1"), keep_blank_values=True, encoding="utf-8")


class _TooLarge(Exception):
    pass


class _BadForm(Exception):
    pass


def _one(form: list[tuple[str, str]], name: str) -> str:
    values = [v for k, v in form if k == name]
    return values[-1] if values else ""


def _scope(ref: str, form: list[tuple[str, str]]) -> revert.Scope:
    return revert.Scope(
        ref, _one(form, "task"), _one(form, "actor"), _one(form, "range"), _one(form, "include_unknown") == "1", _one(form, "words"),
    )


def _choices(form: list[tuple[str, str]]) -> dict[bytes, str]:
    """Each conflicted file's choice (fields ``c.<path token>``: ours, theirs or markers)."""
    return {path_from_token(k[2:]): v for k, v in form if k.startswith("c.") and len(k) > 2}


def _form_paths(form: list[tuple[str, str]]) -> list[bytes]:
    return [path_from_token(v) for k, v in form if k == "p" and v]


def _routes(ui: UiApp, read_only: bool) -> list[Any]:
    """Every route; those that change something answer :meth:`UiApp.refused` when ``read_only``."""
    from starlette.routing import Route

    def change(path: str, handler: Callable[[Request], Awaitable[Response]], methods: list[str]) -> Route:
        return Route(path, ui.refused if read_only else handler, methods=methods)

    return [
        Route("/", ui.timeline),
        Route("/timeline.frag", ui.timeline_fragment),
        Route("/api/revision", ui.revision),
        Route("/here.frag", ui.here),
        Route("/timeline.prompts", ui.prompts),
        Route("/c/{cid}", ui.checkpoint),
        Route("/c/{cid}/file", ui.file),
        Route("/c/{cid}/raw", ui.raw),
        Route("/c/{cid}/image", ui.image),
        Route("/c/{cid}/towards.frag", ui.towards),
        Route("/c/{cid}/conversation.json", ui.conversation),
        Route("/history", ui.history),
        Route("/compare", ui.compare),
        Route("/range", ui.range_page),
        Route("/ops", ui.operations),
        Route("/static/{name}", ui.static_file),
        change("/c/{cid}/restore/preview", ui.restore_preview, methods=["POST"]),
        change("/c/{cid}/restore", ui.restore, methods=["POST"]),
        change("/c/{cid}/revert/preview", ui.revert_preview, methods=["POST"]),
        change("/c/{cid}/revert/confirm", ui.revert_confirm, methods=["POST"]),
        change("/revert/preview", ui.revert_preview, methods=["POST"]),
        change("/revert/confirm", ui.revert_confirm, methods=["POST"]),
        change("/undo/preview", ui.undo_preview, methods=["POST"]),
        change("/undo", ui.undo, methods=["POST"]),
        change("/c/{cid}/tag", ui.tag, methods=["POST"]),
        change("/c/{cid}/untag", ui.untag, methods=["POST"]),
    ]


def create_app(
    store: Store,
    *,
    host: str,
    port: int,
    token: str | None = None,
    credentials: Credentials | None = None,
    peer: AdmitPeer | None = None,
    read_only: bool = False,
    remote: str | None = None,
) -> Any:
    """The ASGI application: the routes behind :class:`snapstore.ui.security.Guard`.

    ``read_only`` (``snapstore ui --remote NAME`` over the remote's cache store, ``remote`` its
    name for the banner): no working-tree row or note, no restore, undo, revert or tag form, and
    every change route answers 403 without touching the store.

    ``credentials`` holds the login tokens and sessions (a new set by default); ``token``, when
    given, is added to it as a one-time login token.  ``peer`` decides which connections are
    served at all (:class:`snapstore.ui.peer.PeerCheck`; the server sets it, the in-process test
    client has no socket to check).
    """
    from starlette.applications import Starlette
    from starlette.middleware.gzip import DEFAULT_EXCLUDED_CONTENT_TYPES as UNZIPPED
    from starlette.middleware.gzip import GZipMiddleware
    from starlette.responses import PlainTextResponse

    ui = UiApp(store, read_only=read_only, remote=remote)

    async def too_large(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("the form is too large", status_code=413)

    async def bad_form(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("forms must be application/x-www-form-urlencoded", status_code=415)

    async def not_found(request: Request, exc: Exception) -> Response:
        """An unknown address: the page frame and a way back, not a bare "Not Found"."""
        from starlette.exceptions import HTTPException
        from starlette.responses import HTMLResponse

        status = exc.status_code if isinstance(exc, HTTPException) else 404
        message = "no such page here" if status == 404 else "this address does not take that method"
        return HTMLResponse(page(f"Error {status}", error_body(status, message), root=ui.root, banner=ui.banner), status_code=status)

    routes = _routes(ui, read_only)
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        _TooLarge: too_large, _BadForm: bad_form, 404: not_found, 405: not_found,
    }
    app = Starlette(routes=routes, exception_handlers=handlers)
    # pages and fragments gzipped (a timeline of 77 KB is 12 KB); raw downloads stream as they are
    zipped = GZipMiddleware(app, minimum_size=1024, compresslevel=6, exclude_content_types=(*UNZIPPED, "application/octet-stream"))
    return Guard(zipped, hosts=allowed_hosts(host, port), port=port, credentials=credentials, token=token, peer=peer)
