"""SCIM 2.0 (RFC 7643/7644) at ``/scim/v2``: the organisation's users and groups → principals.

An identity provider (Okta, Entra ID, Keycloak …) provisions ``/scim/v2/Users``
and ``/scim/v2/Groups``; the protocol — filters, sorting, paging, PATCH
operations, ETags and ``If-Match``, bulk, the discovery endpoints — is
``scim2-server``'s (over ``scim2-models``), not written here. This module is
its storage, :class:`Directory`: the SCIM resources, kept in a small SQLite
database (``ks serve --scim FILE``), and their meaning in the store:

- a User is the principal ``user:<userName>``; a Group ``group:<displayName>``
  (a name that is no valid principal, or a second group of the same name, is
  refused with SCIM's 400/409);
- a Group's members become the store's memberships (``principals add-member``),
  as one change each: a user that is not ``active`` and a deleted user hold
  none (deleting a user also takes it out of every group), so it loses what
  its groups granted on its next query — memberships are live;
- :meth:`Directory.refusal` is the OAuth veto: with SCIM on, a JWT caller must
  be an active provisioned user, so a deprovisioned user's still-valid access
  token is refused on its next request.

Only the memberships SCIM made are changed by SCIM (those loaded otherwise stay).
Every call needs a caller with the admin scope (a token-file admin token, or an
access token with the admin scope).
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio.to_thread
from scim2_models import (
    ForbiddenException,
    InvalidValueException,
    Resource,
    ResourceType,
    ResponseParameters,
    ScimProvider,
    SearchRequest,
    UnauthorizedException,
    UniquenessException,
)
from scim2_server.applications.asgi import ASGIApplication
from scim2_server.memory import InMemoryStorage
from scim2_server.requests import ScimRequest
from scim2_server.responses import ScimResponse
from scim2_server.service import ScimService
from scim2_server.storage import AsyncScimStorage, SearchPage, search_page
from scim2_server.utils import (
    load_default_resource_types,
    load_default_schemas,
    load_default_service_provider_config,
)

from knowledge_store.errors import InvalidRequest, KnowledgeStoreError
from knowledge_store.model import check_principal
from knowledge_store.requests import MemberRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.access import Access
from knowledge_store.surfaces.auth import AuthError, Caller, bearer_token

__all__ = ["SCIM_PREFIX", "Directory", "ScimApp", "scim_app"]

#: The caller of the SCIM request being served (its changes are recorded as that caller's).
_CALLER: ContextVar[Caller | None] = ContextVar("knowledge_store_scim_caller", default=None)

log = logging.getLogger("uvicorn.error")

#: Where the SCIM endpoints are mounted (``/scim/v2/Users`` …).
SCIM_PREFIX = "/scim"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (id TEXT PRIMARY KEY, type TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mirrored (grp TEXT NOT NULL, member TEXT NOT NULL,
                                     PRIMARY KEY (grp, member)) WITHOUT ROWID;
"""


USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"


def _is_user(resource: Resource[Any]) -> bool:
    """A User (the provider's models are built from the schemas: told apart by schema)."""
    return USER_SCHEMA in (resource.schemas or [])


def _is_group(resource: Resource[Any]) -> bool:
    return GROUP_SCHEMA in (resource.schemas or [])


def _principal(resource: Resource[Any]) -> str:
    """The principal a User or Group stands for; SCIM's 400 when it can't be one."""
    if _is_user(resource):
        kind, name = "user", getattr(resource, "user_name", None)
    elif _is_group(resource):
        kind, name = "group", getattr(resource, "display_name", None)
    else:  # pragma: no cover - only the two resource types are served
        raise InvalidValueException(detail=f"unknown resource {type(resource).__name__}")
    try:
        return check_principal(f"{kind}:{name}")
    except InvalidRequest as exc:
        raise InvalidValueException(
            detail=f"{'userName' if kind == 'user' else 'displayName'} {str(name)[:200]!r} can't"
            f" name a principal: {exc.message}"
        ) from None


def _version(resource: Resource[Any]) -> int:
    version = resource.meta.version if resource.meta is not None else None
    digits = "".join(c for c in str(version or "") if c.isdigit())
    return int(digits) if digits else 0


class Directory(InMemoryStorage):
    """The SCIM users and groups, persisted in SQLite and mirrored into the store's memberships.

    scim2-server's in-memory storage does the searching (filters, sorting, paging),
    the uniqueness of ``userName`` and the versions (ETags); this class keeps every
    write in ``path`` and turns group memberships into the store's.
    """

    def __init__(self, store: KnowledgeStore, path: str | Path, provider: ScimProvider) -> None:
        super().__init__()
        self.store = store
        self.path = Path(path)
        self.provider = provider
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)
        self._db_lock = threading.Lock()
        loaded: list[Resource[Any]] = []
        for kind, doc in self._db.execute("SELECT type, doc FROM resources"):
            model = provider.model_for(kind)
            assert model is not None
            resource = model.model_validate(json.loads(doc))
            assert isinstance(resource, Resource)
            loaded.append(resource)
        self.resources = loaded
        last = max((_version(r) for r in loaded), default=0)
        self.versions = itertools.count(last + 1)
        self._mirrored = {
            (str(g), str(m)) for g, m in self._db.execute("SELECT grp, member FROM mirrored")
        }
        self._active: set[str] = set()
        self._mirror()  # the store may have been changed while the server was down

    # -- writes -----------------------------------------------------------------------------------
    def create(self, resource_type: ResourceType, resource: Resource[Any]) -> Resource[Any]:
        with self.lock:
            self._check_name(resource)
            created = super().create(resource_type, resource)
            self._commit([created], [])
            return created

    def update(
        self,
        resource_type: ResourceType,
        resource: Resource[Any],
        *,
        expected_version: str | None = None,
    ) -> Resource[Any]:
        with self.lock:
            self._check_name(resource)
            updated = super().update(resource_type, resource, expected_version=expected_version)
            self._commit([updated], [])
            return updated

    def delete(
        self, resource_type: ResourceType, resource_id: str, *, expected_version: str | None = None
    ) -> None:
        with self.lock:
            super().delete(resource_type, resource_id, expected_version=expected_version)
            changed = []
            for group in self._groups():  # a deleted member leaves every group (RFC 7644 §3.6)
                kept = [m for m in group.members or [] if m.value != resource_id]
                if len(kept) != len(group.members or []):
                    group.members = kept
                    changed.append(super().update(self._type_of(group), group))
            self._commit(changed, [resource_id])

    def _type_of(self, resource: Resource[Any]) -> ResourceType:
        name = "User" if _is_user(resource) else "Group"
        return next(rt for rt in self.provider.resource_types if rt.name == name)

    def _check_name(self, resource: Resource[Any]) -> None:
        principal = _principal(resource)
        if _is_group(resource):
            for other in self._groups():
                if other.id != resource.id and _principal(other) == principal:
                    raise UniquenessException(
                        detail=f"another group is named {getattr(resource, 'display_name', None)!r}: both would be"
                        f" {principal}"
                    )

    def _commit(self, written: Iterable[Resource[Any]], deleted: Iterable[str]) -> None:
        with self._db_lock:
            self._db.execute("BEGIN")
            for resource in written:
                self._db.execute(
                    "INSERT INTO resources (id, type, doc) VALUES (?, ?, ?)"
                    " ON CONFLICT (id) DO UPDATE SET type = excluded.type, doc = excluded.doc",
                    (resource.id, self._type_of(resource).name, resource.model_dump_json()),
                )
            for resource_id in deleted:
                self._db.execute("DELETE FROM resources WHERE id = ?", (resource_id,))
            self._db.execute("COMMIT")
        self._mirror()

    # -- the store's memberships ------------------------------------------------------------------
    def _groups(self) -> list[Any]:
        return [r for r in self.resources if _is_group(r)]

    def _mirror(self) -> None:
        """Make the memberships SCIM owns in the store what the directory says, now."""
        by_id = {r.id: r for r in self.resources}
        active = {
            _principal(r)
            for r in self.resources
            if _is_user(r) and getattr(r, "active", None) is not False
        }
        wanted: set[tuple[str, str]] = set()
        for group in self._groups():
            for member in group.members or []:
                found = by_id.get(member.value)
                if found is None:
                    continue
                principal = _principal(found)
                if _is_group(found) or principal in active:
                    wanted.add((_principal(group), principal))
        gone, new = self._mirrored - wanted, wanted - self._mirrored
        for grp, who in sorted(gone):
            try:
                self._change("principals_remove_member", self.store.remove_member, grp, who)
            except KnowledgeStoreError as exc:  # already gone: nothing to undo
                log.info("SCIM: %s ∌ %s: %s", grp, who, exc)
        for grp, who in sorted(new):
            try:
                self._change("principals_add_member", self.store.add_member, grp, who)
            except KnowledgeStoreError as exc:  # a cycle: the directory asks for the impossible
                log.warning("SCIM: %s ∋ %s refused by the store: %s", grp, who, exc)
                wanted.discard((grp, who))
        with self._db_lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "DELETE FROM mirrored WHERE grp = ? AND member = ?", sorted(self._mirrored - wanted)
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO mirrored (grp, member) VALUES (?, ?)", sorted(wanted)
            )
            self._db.execute("COMMIT")
        self._mirrored = wanted
        self._active = active

    def _change(
        self, operation: str, change: Callable[[str, str], Any], group: str, member: str
    ) -> None:
        """One membership change, recorded in the audit log as the SCIM request's caller's
        (none: the directory brought up to date when the server starts)."""
        caller = _CALLER.get()
        with self.store.auditor.recording(
            "scim",
            operation,
            subject=caller.subject if caller is not None else None,
            identity=caller.principal if caller is not None else None,
            admin=True,
            request=MemberRequest(group=group, member=member),
        ) as recording:
            answer = change(group, member)
            if recording is not None:
                recording.answer = answer

    def refusal(self, principal: str) -> str | None:
        """Why an OAuth caller ``principal`` may not read (None: an active provisioned user)."""
        if principal in self._active:
            return None
        return (
            f"{principal} is not an active user of this server's SCIM directory (never"
            " provisioned, deactivated or deleted): access is refused"
        )

    def close(self) -> None:
        self._db.close()


class _AsyncDirectory(AsyncScimStorage):
    """The directory for the ASGI application: each call in a worker thread (it writes)."""

    supports_cursors = True

    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    async def get(
        self,
        resource_type: ResourceType,
        resource_id: str,
        *,
        response_parameters: ResponseParameters[Any] | None = None,
    ) -> Resource[Any]:
        return await anyio.to_thread.run_sync(self.directory.get, resource_type, resource_id)

    async def search(
        self,
        resource_types: list[ResourceType],
        search_request: SearchRequest[Any],
        *,
        position: Any = None,
    ) -> SearchPage:
        return await anyio.to_thread.run_sync(
            search_page, self.directory, resource_types, search_request, position
        )

    async def create(self, resource_type: ResourceType, resource: Resource[Any]) -> Resource[Any]:
        return await anyio.to_thread.run_sync(self.directory.create, resource_type, resource)

    async def update(
        self,
        resource_type: ResourceType,
        resource: Resource[Any],
        *,
        expected_version: str | None = None,
    ) -> Resource[Any]:
        return await anyio.to_thread.run_sync(
            lambda: self.directory.update(
                resource_type, resource, expected_version=expected_version
            )
        )

    async def delete(
        self, resource_type: ResourceType, resource_id: str, *, expected_version: str | None = None
    ) -> None:
        await anyio.to_thread.run_sync(
            lambda: self.directory.delete(
                resource_type, resource_id, expected_version=expected_version
            )
        )


def provider() -> ScimProvider:
    """RFC 7643's schemas and resource types (User with the enterprise extension, Group)."""
    config = load_default_service_provider_config()
    return ScimProvider.from_discovery(
        load_default_schemas().values(), load_default_resource_types().values(), config=config
    )


class ScimApp(ASGIApplication):
    """scim2-server's ASGI application; every request needs a caller with the admin scope."""

    def __init__(self, directory: Directory, access: Access) -> None:
        super().__init__(
            _AsyncDirectory(directory), directory.provider, ScimService(directory.provider)
        )
        self.access = access

    async def dispatch_request(self, request: ScimRequest) -> ScimResponse:
        if self.needs_auth(request):
            token = bearer_token(request.header("Authorization"))
            try:
                caller = await self.access.resolve(token)
            except AuthError as exc:
                raise UnauthorizedException(detail=exc.message) from None
            if not caller.admin:
                raise ForbiddenException(
                    detail="SCIM provisions this server's users and groups: it needs a token"
                    " with the admin scope"
                )
            token_set = _CALLER.set(caller)  # the worker threads the storage runs in copy it
            try:
                return await super().dispatch_request(request)
            finally:
                _CALLER.reset(token_set)
        return await super().dispatch_request(request)


def scim_app(store: KnowledgeStore, path: str | Path, access: Access) -> tuple[ScimApp, Directory]:
    """The SCIM application over the directory kept in ``path``, and that directory."""
    directory = Directory(store, path, provider())
    return ScimApp(directory, access), directory
