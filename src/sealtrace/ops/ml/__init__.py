"""Classical ML operators of the ai.onnx.ml domain, one module per family: ``encoders``
(LabelEncoder, CategoryMapper, OneHotEncoder), ``preprocessing`` (ArrayFeatureExtractor,
Binarizer, Scaler, Normalizer, Imputer, FeatureVectorizer), ``maps`` (ZipMap, DictVectorizer,
CastMap), ``linear`` (LinearRegressor, LinearClassifier), ``svm`` (SVMRegressor, SVMClassifier)
and ``trees`` (TreeEnsemble*). Maps are Python dicts, as ONNX Runtime's Python API takes and
returns them.

Where the spec leaves a case open (two-class scores, post transforms on one score), the kernels do
what ONNX Runtime, the numerical oracle, does; cases where ORT leaves part of its output unwritten
are refused.

Numerics are portable (docs/numerics.md): dot products are correctly rounded sums (numerics.gemm,
with the intercept or rho inside the one rounding), exp / tanh / log / sigmoid / pow are correctly
rounded (numerics.apply, numerics.power), reductions are numerics' (softmax, sums, norms), and every
other step is an IEEE operation in a fixed order (tree votes are added one at a time in sample and
tree order; libsvm's probability coupling accumulates its sums in index order)."""
