"""``sealtrace serve``: audited serving over the Open Inference Protocol v2.

A thin shell over the library: :class:`InferenceService` holds the served models (verified
containers opened into Sessions), the ledger and, for the deferred audit, the replay queue;
:func:`create_app` is the FastAPI app that speaks the protocol over it. docs/serving.md says what
each endpoint does and what a 200 guarantees.

    from sealtrace.serve import ServeConfig, InferenceService, create_app
    service = InferenceService(ServeConfig(models=["model.seal"], ledger="ledger.db", sign_key="key.pem"))
    app = create_app(service)        # run it with uvicorn
"""

from __future__ import annotations

from sealtrace.serve.app import create_app
from sealtrace.serve.protocol import ProtocolError
from sealtrace.serve.service import InferenceService, ServeConfig

__all__ = ["InferenceService", "ProtocolError", "ServeConfig", "create_app"]
