"""Torch translations of ONNX operators, the torch counterpart of :mod:`sealtrace.ops`.

Both the torch backend (:mod:`sealtrace.backends.torch`, step by step) and the fx converter
(:mod:`sealtrace.torchbridge`) run a Plan on these translations:

- :mod:`~sealtrace.torchops.registry`: translations registered by (op_type, since_version);
- :mod:`~sealtrace.torchops.translations`: one module per operator family, registered on import;
- :mod:`~sealtrace.torchops.steps`: each step's translation, found before anything runs;
- :mod:`~sealtrace.torchops.reference_step`: steps that run their NumPy reference kernel;
- :mod:`~sealtrace.torchops.control`: Scan, shared by both executors;
- :mod:`~sealtrace.torchops.dtypes`: ONNX / NumPy element types <-> torch dtypes.
"""
