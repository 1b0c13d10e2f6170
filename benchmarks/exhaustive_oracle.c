/* The oracle of benchmarks/exhaustive_functions.py: float32 elementwise functions, correctly rounded
 * (to nearest, ties to even) by GNU MPFR, independently of sealtrace's own code path (no NumPy, no
 * libm, no gmpy2).
 *
 * Built at run time by the driver (cc -O2 -shared -fPIC ... -lmpfr -lgmp) and called through ctypes:
 *
 *     int oracle_eval(const char *name, const double *params, int nparams,
 *                     const uint32_t *in, uint32_t *out, size_t n, size_t *failed);
 *
 * in[i] and out[i] are float32 bit patterns. Returns 0; -1 for an unknown name or a wrong number of
 * parameters; -2 when an element could not be decided (its index in *failed): a composite whose
 * interval still straddles a rounding boundary at MAX_PRECISION bits, or a NaN from a finite input.
 *
 * One-function cases (exp, log, tanh, sin, ..., erf): binary32 is emulated the way the MPFR manual
 * describes it: precision 24, exponent range [-148, 128] (MPFR's significands lie in [1/2, 1)), the
 * function called once in RNDN, then mpfr_subnormalize with its ternary value. MPFR's functions are
 * correctly rounded, so that is RN(f(x)) in binary32, subnormals and overflow included.
 *
 * Composites (sigmoid, softplus, elu, selu, celu, gelu, gelu_tanh, mish, swish): the formula is
 * evaluated in interval arithmetic, each MPFR operation once rounded down (RNDD) for the lower end and
 * once up (RNDU) for the upper end, with every function's monotonicity taken into account, in MPFR's
 * widest exponent range (directed rounding keeps the bounds valid through overflow and underflow:
 * RNDD of an overflow is the largest MPFR number, RNDU of an underflow the smallest positive one). The
 * exact value lies in [lo, hi]; when RN(lo) and RN(hi) in binary32 are the same bits, that is the
 * result (RN is monotone). Otherwise the precision doubles (Ziv's strategy), 64 bits to MAX_PRECISION.
 * The final rounding of lo and hi to binary32 again uses the manual's emulation (mpfr_set to 24 bits
 * in the wide range, then mpfr_check_range and mpfr_subnormalize in the binary32 range with the
 * ternary values, so there is no double rounding).
 *
 * NaN input: NaN. Infinite input: the formula in MPFR's special-value arithmetic, which is IEEE 754's
 * (so gelu(-inf) = -inf * 0 is NaN, as in the formula; elu(-inf) = -alpha).
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <mpfr.h>

#define F32_EMIN (-148)
#define F32_EMAX 128
#define START_PRECISION 64
#define MAX_PRECISION 16384

/* ---------------------------------------------------------------- binary32 <-> MPFR */

static float float_of_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits_of_float(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static void wide_range(void)
{
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
}

static void binary32_range(void)
{
    mpfr_set_emin(F32_EMIN);
    mpfr_set_emax(F32_EMAX);
}

static mpfr_t rounded24;

/* RN(v) in binary32, for any MPFR value v of the wide exponent range; bits. */
static uint32_t to_binary32(mpfr_srcptr v)
{
    int t = mpfr_set(rounded24, v, MPFR_RNDN);
    binary32_range();
    t = mpfr_check_range(rounded24, t, MPFR_RNDN);
    mpfr_subnormalize(rounded24, t, MPFR_RNDN);
    float f = mpfr_get_flt(rounded24, MPFR_RNDN); /* exact: rounded24 is a binary32 value */
    wide_range();
    return bits_of_float(f);
}

/* ---------------------------------------------------------------- one MPFR function */

typedef int (*unary_fn)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);

static mpfr_t single_x, single_y;

static uint32_t eval_single(unary_fn fn, uint32_t in)
{
    binary32_range();
    mpfr_set_flt(single_x, float_of_bits(in), MPFR_RNDN); /* exact: 24 bits, in range */
    int t = fn(single_y, single_x, MPFR_RNDN);
    t = mpfr_subnormalize(single_y, t, MPFR_RNDN);
    float f = mpfr_get_flt(single_y, MPFR_RNDN);
    wide_range();
    return bits_of_float(f);
}

/* ---------------------------------------------------------------- interval arithmetic */

typedef struct {
    mpfr_t lo, hi;
} interval;

#define POOL 12
#define TEMPS 4
static interval pool[POOL];
static mpfr_t temp[TEMPS];
static mpfr_prec_t pool_precision = 0;

static void set_precision(mpfr_prec_t p)
{
    if (p == pool_precision)
        return;
    for (int i = 0; i < POOL; i++) {
        mpfr_set_prec(pool[i].lo, p);
        mpfr_set_prec(pool[i].hi, p);
    }
    for (int i = 0; i < TEMPS; i++)
        mpfr_set_prec(temp[i], p);
    pool_precision = p;
}

static int iv_nan(const interval *a)
{
    return mpfr_nan_p(a->lo) || mpfr_nan_p(a->hi);
}

static void iv_set_nan(interval *r)
{
    mpfr_set_nan(r->lo);
    mpfr_set_nan(r->hi);
}

/* r = [x, x] for an exact double (precision >= 53 makes it exact; else the two ends are its
 * neighbours) */
static void iv_set_d(interval *r, double x)
{
    mpfr_set_d(r->lo, x, MPFR_RNDD);
    mpfr_set_d(r->hi, x, MPFR_RNDU);
}

static void iv_set_flt(interval *r, float x)
{
    mpfr_set_flt(r->lo, x, MPFR_RNDD);
    mpfr_set_flt(r->hi, x, MPFR_RNDU);
}

static void iv_set_str(interval *r, const char *decimal)
{
    mpfr_set_str(r->lo, decimal, 10, MPFR_RNDD);
    mpfr_set_str(r->hi, decimal, 10, MPFR_RNDU);
}

static void iv_neg(interval *r, const interval *a)
{
    mpfr_neg(temp[0], a->hi, MPFR_RNDD);
    mpfr_neg(r->hi, a->lo, MPFR_RNDU);
    mpfr_set(r->lo, temp[0], MPFR_RNDD);
}

static void iv_add(interval *r, const interval *a, const interval *b)
{
    mpfr_add(r->lo, a->lo, b->lo, MPFR_RNDD);
    mpfr_add(r->hi, a->hi, b->hi, MPFR_RNDU);
}

static void iv_add_ui(interval *r, const interval *a, unsigned long k)
{
    mpfr_add_ui(r->lo, a->lo, k, MPFR_RNDD);
    mpfr_add_ui(r->hi, a->hi, k, MPFR_RNDU);
}

/* [min, max] of the four combinations of ends, each rounded down (low) and up (high). */
typedef int (*binary_fn)(mpfr_ptr, mpfr_srcptr, mpfr_srcptr, mpfr_rnd_t);

static void iv_corners(interval *r, const interval *a, const interval *b, binary_fn op)
{
    mpfr_srcptr as[2] = {a->lo, a->hi};
    mpfr_srcptr bs[2] = {b->lo, b->hi};
    int first = 1, nan = 0;
    /* temp[0] the running minimum, temp[1] the running maximum, temp[2] a candidate */
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            op(temp[2], as[i], bs[j], MPFR_RNDD);
            nan |= mpfr_nan_p(temp[2]);
            if (first || mpfr_less_p(temp[2], temp[0]) ||
                (mpfr_zero_p(temp[2]) && mpfr_zero_p(temp[0]) && mpfr_signbit(temp[2])))
                mpfr_set(temp[0], temp[2], MPFR_RNDD);
            op(temp[2], as[i], bs[j], MPFR_RNDU);
            nan |= mpfr_nan_p(temp[2]);
            if (first || mpfr_greater_p(temp[2], temp[1]) ||
                (mpfr_zero_p(temp[2]) && mpfr_zero_p(temp[1]) && !mpfr_signbit(temp[2])))
                mpfr_set(temp[1], temp[2], MPFR_RNDU);
            first = 0;
        }
    }
    if (nan) {
        iv_set_nan(r);
        return;
    }
    mpfr_set(r->lo, temp[0], MPFR_RNDD);
    mpfr_set(r->hi, temp[1], MPFR_RNDU);
}

static void iv_mul(interval *r, const interval *a, const interval *b)
{
    iv_corners(r, a, b, mpfr_mul);
}

/* b must not contain zero in its interior (the formulas here divide by 1 + exp(.) > 1 or by alpha) */
static void iv_div(interval *r, const interval *a, const interval *b)
{
    iv_corners(r, a, b, mpfr_div);
}

static void iv_increasing(interval *r, const interval *a, unary_fn fn)
{
    fn(r->lo, a->lo, MPFR_RNDD);
    fn(r->hi, a->hi, MPFR_RNDU);
}

static void iv_decreasing(interval *r, const interval *a, unary_fn fn)
{
    fn(temp[0], a->hi, MPFR_RNDD);
    fn(r->hi, a->lo, MPFR_RNDU);
    mpfr_set(r->lo, temp[0], MPFR_RNDD);
}

/* ---------------------------------------------------------------- the composites */

/* r = sigmoid(a) = 1 / (1 + exp(-a)); uses pool[10], pool[11] */
static void iv_sigmoid(interval *r, const interval *a)
{
    interval *t = &pool[10], *one = &pool[11];
    iv_neg(t, a);
    iv_increasing(t, t, mpfr_exp);
    iv_add_ui(t, t, 1);
    iv_set_d(one, 1.0);
    iv_div(r, one, t);
}

/* r = softplus(a) = log(1 + exp(a)), as a + log1p(exp(-a)) where a > 0 (same value, tighter);
 * a is a point interval (the input); uses pool[10] */
static void iv_softplus(interval *r, const interval *a)
{
    interval *t = &pool[10];
    if (mpfr_sgn(a->lo) > 0) {
        iv_neg(t, a);
        iv_increasing(t, t, mpfr_exp);
        iv_increasing(t, t, mpfr_log1p);
        iv_add(r, a, t);
    } else {
        iv_increasing(t, a, mpfr_exp);
        iv_increasing(r, t, mpfr_log1p);
    }
}

enum composite {
    SIGMOID,
    SOFTPLUS,
    ELU,
    SELU,
    CELU,
    GELU,
    GELU_TANH,
    MISH,
    SWISH,
};

/* f(x) enclosed in pool[0] at the pool's precision */
static void eval_interval(enum composite which, float xf, const double *params)
{
    interval *x = &pool[1], *r = &pool[0], *a = &pool[2], *b = &pool[3], *c = &pool[4], *d = &pool[5];
    iv_set_flt(x, xf);
    switch (which) {
    case SIGMOID:
        iv_sigmoid(r, x);
        break;
    case SOFTPLUS:
        iv_softplus(r, x);
        break;
    case ELU: /* x >= 0 ? x : alpha * expm1(x) */
        if (xf >= 0.0f) {
            iv_set_flt(r, xf);
        } else {
            iv_increasing(a, x, mpfr_expm1);
            iv_set_d(b, params[0]);
            iv_mul(r, b, a);
        }
        break;
    case SELU: /* x > 0 ? gamma * x : gamma * alpha * expm1(x) */
        iv_set_d(b, params[1]);
        if (xf > 0.0f) {
            iv_mul(r, b, x);
        } else {
            iv_set_d(c, params[0]);
            iv_mul(c, b, c);
            iv_increasing(a, x, mpfr_expm1);
            iv_mul(r, c, a);
        }
        break;
    case CELU: /* x >= 0 ? x : alpha * expm1(x / alpha) */
        if (xf >= 0.0f) {
            iv_set_flt(r, xf);
        } else {
            iv_set_d(b, params[0]);
            iv_div(a, x, b);
            iv_increasing(a, a, mpfr_expm1);
            iv_mul(r, b, a);
        }
        break;
    case GELU: /* x * Phi(x) = x * erfc(-x / sqrt 2) / 2 */
        mpfr_sqrt_ui(b->lo, 2, MPFR_RNDD);
        mpfr_sqrt_ui(b->hi, 2, MPFR_RNDU);
        iv_neg(a, x);
        iv_div(a, a, b);
        iv_decreasing(a, a, mpfr_erfc);
        iv_set_d(c, 0.5);
        iv_mul(a, a, c);
        iv_mul(r, x, a);
        break;
    case GELU_TANH: /* x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x**3)) */
        iv_mul(a, x, x);
        iv_mul(a, a, x);
        iv_set_str(b, "0.044715");
        iv_mul(a, b, a);
        iv_add(a, x, a);
        mpfr_const_pi(c->lo, MPFR_RNDD);
        mpfr_const_pi(c->hi, MPFR_RNDU);
        iv_set_d(d, 2.0);
        iv_div(c, d, c);
        iv_increasing(c, c, mpfr_sqrt);
        iv_mul(c, d, c);
        iv_mul(a, c, a);
        iv_sigmoid(a, a);
        iv_mul(r, x, a);
        break;
    case MISH: /* x * tanh(softplus(x)) */
        iv_softplus(a, x);
        iv_increasing(a, a, mpfr_tanh);
        iv_mul(r, x, a);
        break;
    case SWISH: /* x * sigmoid(alpha x) */
        iv_set_d(b, params[0]);
        iv_mul(a, b, x);
        iv_sigmoid(a, a);
        iv_mul(r, x, a);
        break;
    }
}

/* RN(f(x)) in binary32 by rising precision; returns 0, or -2 when undecided */
static int eval_composite(enum composite which, uint32_t in, const double *params, uint32_t *out)
{
    float xf = float_of_bits(in);
    if (xf != xf) {
        *out = in | 0x00400000u; /* NaN in, NaN out */
        return 0;
    }
    for (mpfr_prec_t p = START_PRECISION; p <= MAX_PRECISION; p *= 2) {
        set_precision(p);
        eval_interval(which, xf, params);
        interval *r = &pool[0];
        if (iv_nan(r)) {
            if (mpfr_nan_p(r->lo) && mpfr_nan_p(r->hi) && isinf(xf)) {
                *out = 0x7fc00000u; /* an infinite input whose formula is NaN (inf * 0, inf / inf) */
                return 0;
            }
            return -2;
        }
        uint32_t low = to_binary32(r->lo);
        uint32_t high = to_binary32(r->hi);
        if (low == high) {
            *out = low;
            set_precision(START_PRECISION);
            return 0;
        }
    }
    set_precision(START_PRECISION);
    return -2;
}

/* ---------------------------------------------------------------- the table */

static const struct {
    const char *name;
    unary_fn fn;
} singles[] = {
    {"exp", mpfr_exp},     {"log", mpfr_log},     {"tanh", mpfr_tanh},   {"sin", mpfr_sin},
    {"cos", mpfr_cos},     {"tan", mpfr_tan},     {"asin", mpfr_asin},   {"acos", mpfr_acos},
    {"atan", mpfr_atan},   {"sinh", mpfr_sinh},   {"cosh", mpfr_cosh},   {"asinh", mpfr_asinh},
    {"acosh", mpfr_acosh}, {"atanh", mpfr_atanh}, {"erf", mpfr_erf},     {"log10", mpfr_log10},
};

static const struct {
    const char *name;
    enum composite which;
    int nparams;
} composites[] = {
    {"sigmoid", SIGMOID, 0}, {"softplus", SOFTPLUS, 0},   {"elu", ELU, 1},   {"selu", SELU, 2},
    {"celu", CELU, 1},       {"gelu", GELU, 0},           {"gelu_tanh", GELU_TANH, 0},
    {"mish", MISH, 0},       {"swish", SWISH, 1},
};

static int initialized = 0;

static void initialize(void)
{
    if (initialized)
        return;
    mpfr_init2(rounded24, 24);
    mpfr_init2(single_x, 24);
    mpfr_init2(single_y, 24);
    for (int i = 0; i < POOL; i++) {
        mpfr_init2(pool[i].lo, START_PRECISION);
        mpfr_init2(pool[i].hi, START_PRECISION);
    }
    for (int i = 0; i < TEMPS; i++)
        mpfr_init2(temp[i], START_PRECISION);
    pool_precision = START_PRECISION;
    initialized = 1;
}

int oracle_eval(const char *name, const double *params, int nparams, const uint32_t *in, uint32_t *out,
                size_t n, size_t *failed)
{
    initialize();
    wide_range();
    for (size_t k = 0; k < sizeof singles / sizeof singles[0]; k++) {
        if (strcmp(name, singles[k].name) == 0) {
            if (nparams != 0)
                return -1;
            for (size_t i = 0; i < n; i++)
                out[i] = eval_single(singles[k].fn, in[i]);
            return 0;
        }
    }
    for (size_t k = 0; k < sizeof composites / sizeof composites[0]; k++) {
        if (strcmp(name, composites[k].name) == 0) {
            if (nparams != composites[k].nparams)
                return -1;
            for (size_t i = 0; i < n; i++) {
                if (eval_composite(composites[k].which, in[i], params, &out[i]) != 0) {
                    *failed = i;
                    return -2;
                }
            }
            return 0;
        }
    }
    return -1;
}

/* The MPFR version the oracle runs on (for the report). */
const char *oracle_mpfr_version(void)
{
    return mpfr_get_version();
}
