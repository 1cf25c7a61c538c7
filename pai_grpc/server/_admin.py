"""AdminService: trusted operations behind an admin credential."""

from __future__ import annotations

from pai.v1 import admin_service_pb2 as pb
from pai.v1 import admin_service_pb2_grpc as pb_grpc
from pai_grpc.convert import (
    lifecycle_message_to_proto,
    message_view_from_proto,
    run_to_proto,
    sort_order_from_proto,
    struct_from_proto,
    struct_to_proto,
    thread_to_proto,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.runtime import Runtime
from pai_grpc.server._errors import Context, fill_unimplemented, guarded
from pai_grpc.server._scope import ScopeResolver


class AdminService(pb_grpc.AdminServiceServicer):
    """Visibility rewrites, private metadata reads and run enrichment."""

    def __init__(self, runtime: Runtime, scopes: ScopeResolver) -> None:
        self._runtime = runtime
        self._scopes = scopes

    @guarded
    async def UpdateMessageVisibility(
        self, request: pb.UpdateMessageVisibilityRequest, context: Context
    ) -> pb.UpdateMessageVisibilityResponse:
        """A visibility rewrite through the history-rewrite hooks."""
        scope = self._scopes.resolve_admin(context)
        thread = await self._runtime.update_message_visibility(
            scope,
            request.thread_id,
            list(request.message_ids),
            transcript=request.transcript if request.HasField("transcript") else None,
            context=request.context if request.HasField("context") else None,
            etag=request.etag,
        )
        return pb.UpdateMessageVisibilityResponse(thread=thread_to_proto(thread))

    @guarded
    async def GetThreadPrivateMetadata(
        self, request: pb.GetThreadPrivateMetadataRequest, context: Context
    ) -> pb.GetThreadPrivateMetadataResponse:
        """A thread's private metadata."""
        scope = self._scopes.resolve_admin(context)
        private, version = await self._runtime.get_thread_private_metadata(scope, request.thread_id)
        return pb.GetThreadPrivateMetadataResponse(
            private_metadata=struct_to_proto(private), version=version
        )

    @guarded
    async def GetRunPrivateMetadata(
        self, request: pb.GetRunPrivateMetadataRequest, context: Context
    ) -> pb.GetRunPrivateMetadataResponse:
        """A run's private metadata."""
        scope = self._scopes.resolve_admin(context)
        private = await self._runtime.get_run_private_metadata(scope, request.run_id)
        return pb.GetRunPrivateMetadataResponse(private_metadata=struct_to_proto(private))

    @guarded
    async def UpdateRunMetadata(
        self, request: pb.UpdateRunMetadataRequest, context: Context
    ) -> pb.UpdateRunMetadataResponse:
        """Post-run enrichment of run metadata."""
        scope = self._scopes.resolve_admin(context)
        try:
            metadata = (
                struct_from_proto(request.metadata, path="metadata")
                if request.HasField("metadata")
                else None
            )
            private = (
                struct_from_proto(request.private_metadata, path="private_metadata")
                if request.HasField("private_metadata")
                else None
            )
        except ValueError as e:
            raise InvalidArgument.field("metadata", str(e)) from e
        run = await self._runtime.update_run_metadata(
            scope, request.run_id, metadata=metadata, private_metadata=private
        )
        return pb.UpdateRunMetadataResponse(run=run_to_proto(run))

    @guarded
    async def ListLifecycleMessages(
        self, request: pb.ListLifecycleMessagesRequest, context: Context
    ) -> pb.ListLifecycleMessagesResponse:
        """Messages with visibility and private metadata."""
        scope = self._scopes.resolve_admin(context)
        try:
            view = message_view_from_proto(request.view, default="all", field="view")
            order = sort_order_from_proto(request.order, default="asc", field="order")
        except ValueError as e:
            raise InvalidArgument.field("view", str(e)) from e
        messages, token = await self._runtime.list_lifecycle_messages(
            scope,
            request.thread_id,
            view=view,
            order=order,
            page_size_=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListLifecycleMessagesResponse(
            messages=[lifecycle_message_to_proto(m) for m in messages], next_page_token=token
        )


fill_unimplemented(AdminService, "pai.v1.AdminService")
