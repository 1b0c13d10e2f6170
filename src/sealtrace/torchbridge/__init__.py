"""ONNX -> PyTorch: torch translations of ONNX ops, an fx module built from a Plan, and export parity."""
