"""sealtrace's evidence in the ecosystem's formats: model-signing bundles, in-toto run attestations,
CycloneDX ML-BOMs (docs/supply-chain.md)."""
