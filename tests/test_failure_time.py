"""The wall-time distribution under random failures (jctopt.job.failure_time) against Daly's mean,
a high-precision evaluation of the exact moments, and a discrete-event simulator."""

import functools
import math
from decimal import Decimal, getcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jctopt.job import failure_time as F
from jctopt.job import reliability as R

DAY = 86400.0
YOUNG_SEED_S = math.sqrt(2.0 * 30.0 * DAY)  # seed 001: 24 h MTBF, 30 s checkpoint write

# --- Discrete-event simulator: the oracle ------------------------------------------------

COMPUTE, WRITE, RESTART = 0, 1, 2
NEXT_PHASE = np.array([WRITE, COMPUTE, COMPUTE])  # a restart resumes at the last checkpoint


def simulate_wall_times(n_segments, tau_s, ckpt_s, restart_s, mtbf_s, n_jobs, rng):
    """Wall time (s) of n_jobs independent jobs of n_segments x (tau_s compute, then a
    ckpt_s checkpoint write). Failures are a Poisson process (exponential gaps of mean
    mtbf_s) running through compute, writes and restarts alike; a failure discards the
    segment in progress (work since the last completed checkpoint) and starts a restart of
    restart_s, which a further failure starts afresh. Every job advances by one event (a
    failure or the end of its current phase) per loop iteration."""
    duration_s = np.array([tau_s, ckpt_s, restart_s])
    t_s = np.zeros(n_jobs)
    phase = np.full(n_jobs, COMPUTE)
    phase_end_s = t_s + tau_s
    next_failure_s = rng.exponential(mtbf_s, n_jobs)
    checkpoints = np.zeros(n_jobs, dtype=np.int64)
    running = np.ones(n_jobs, dtype=bool)
    while running.any():
        fails = running & (next_failure_s < phase_end_s)
        ends = running & ~fails
        t_s = np.where(fails, next_failure_s, np.where(ends, phase_end_s, t_s))
        next_failure_s[fails] = t_s[fails] + rng.exponential(mtbf_s, np.count_nonzero(fails))
        written = ends & (phase == WRITE)
        checkpoints += written
        running &= ~(written & (checkpoints == n_segments))
        phase = np.where(fails, RESTART, np.where(ends, NEXT_PHASE[phase], phase))
        phase_end_s = t_s + duration_s[phase]
    return t_s


# (name, segments, tau_s, ckpt_s, restart_s, mtbf_s); L/M = (tau + delta) / M
GRID = [
    ("seed001 day, R=640 s", 38, YOUNG_SEED_S, 30.0, 640.0, DAY),  # L/M = 0.027
    ("seed001 day, R=1140 s", 38, YOUNG_SEED_S, 30.0, 1140.0, DAY),  # with the 500 s catch-up
    ("seed001 4 days", 150, YOUNG_SEED_S, 30.0, 640.0, DAY),
    ("rare: L/M=0.003", 200, 1000.0, 20.0, 300.0, 3e5),  # about one failure per job
    ("10 long segments", 10, 3600.0, 60.0, 600.0, DAY),
    ("L/M=0.1", 120, 500.0, 100.0, 200.0, 6000.0),
    ("L/M=0.09, big R", 50, 600.0, 60.0, 900.0, 7200.0),
    ("L/M=0.3", 100, 1500.0, 300.0, 600.0, 6000.0),  # failure-heavy
    ("L/M=0.55, R=M/2", 60, 1800.0, 180.0, 1800.0, 3600.0),
    ("L/M=1", 50, 3000.0, 600.0, 300.0, 3600.0),
    ("few segments, R=0.6 M", 20, 600.0, 60.0, 3600.0, 6000.0),  # one failure ~ 30 % of N L
]
N_JOBS = 100_000
# Jitted once per argument shape: eager dispatch would compile every primitive on its own.
quantile = jax.jit(F.wall_time_quantile)
cdf = jax.jit(F.wall_time_cdf)


@functools.cache
def simulated(i):
    _, n, tau, ckpt, restart, mtbf = GRID[i]
    return simulate_wall_times(n, tau, ckpt, restart, mtbf, N_JOBS, np.random.default_rng(1000 + i))


@functools.cache
def analytic():
    """Mean, variance, P10 and P90 for the whole grid in one batched call each."""
    n, tau, ckpt, restart, mtbf = (jnp.array([g[k] for g in GRID]) for k in range(1, 6))
    mean, var, ok = F.wall_time_moments(n * tau, tau, ckpt, restart, mtbf)
    col = [x[:, None] for x in (n * tau, tau, ckpt, restart, mtbf)]
    q = quantile(jnp.array([[0.1, 0.9]]), *col)
    return np.asarray(mean), np.asarray(var), np.asarray(ok), np.asarray(q)


def test_simulator_without_failures_takes_the_failure_free_time():
    wall = simulate_wall_times(7, 100.0, 5.0, 50.0, 1e15, 1000, np.random.default_rng(0))
    np.testing.assert_allclose(wall, 7 * 105.0, rtol=1e-12)


# --- Moments ------------------------------------------------------------------------------

MOMENT_CASES = [  # (solve_s, tau_s, ckpt_s, restart_s, mtbf_s), fractional N included
    (DAY, YOUNG_SEED_S, 30.0, 640.0, DAY),
    (1000 * DAY, 2276.8, 30.0, 640.0, 1000 * DAY),  # L/M ~ 2.7e-5
    (1e7, 1e-3, 1e-4, 1e-3, 1e3),  # L/M ~ 1e-6
    (123456.0, 1500.0, 300.0, 600.0, 6000.0),
    (5e4, 3000.0, 600.0, 300.0, 3600.0),
    (1e6, 3e4, 6e3, 9e4, 3600.0),  # L/M = 10, R/M = 25
]


@pytest.mark.parametrize("case", MOMENT_CASES)
def test_mean_is_daly(case):
    mean, _, ok = F.wall_time_moments(*case)
    daly, daly_ok = R.expected_wall_time(*case)
    assert mean.dtype == jnp.float64  # jctopt enables x64 on import
    assert float(mean) == pytest.approx(float(daly), rel=1e-9)
    assert bool(ok) == bool(daly_ok)


def _exact_segment_moments(work_s, restart_s, mtbf_s):
    """E[T], Var[T] of one segment at 60 digits from the first-step recursion, with no care
    for cancellation: T = L if X >= L, else X + T', T' the preemptive-repeat time of R + L,
    E[T'] = (e^a - 1) M, E[T'^2] = 2 e^a (e^a - 1 - a) M^2 (a = (R + L)/M)."""
    getcontext().prec = 60
    b, c = Decimal(work_s) / Decimal(mtbf_s), Decimal(restart_s) / Decimal(mtbf_s)
    a, e_b = b + c, (-b).exp()
    m1 = 1 - e_b * (1 + b)  # E[X; X < L] / M
    m2 = 2 * (1 - e_b * (1 + b + b * b / 2))  # E[X^2; X < L] / M^2
    t1, t2 = a.exp() - 1, 2 * a.exp() * (a.exp() - 1 - a)
    mean = b * e_b + m1 + (1 - e_b) * t1
    second = b * b * e_b + m2 + 2 * m1 * t1 + (1 - e_b) * t2
    m = Decimal(mtbf_s)
    return float(mean * m), float((second - mean * mean) * m * m)


@pytest.mark.parametrize("work_s,restart_s,mtbf_s", [
    (1e-6, 0.0, 1.0), (1e-6, 1e-6, 1.0), (2306.8, 640.0, DAY), (2306.8, 640.0, 1e9),
    (0.3, 0.1, 1.0), (1.0, 0.5, 1.0), (5.0, 3.0, 1.0), (30.0, 9.0, 1.0)])
def test_segment_moments_match_a_60_digit_evaluation(work_s, restart_s, mtbf_s):
    mean, var = F.segment_moments(work_s, restart_s, mtbf_s)
    mean_ref, var_ref = _exact_segment_moments(work_s, restart_s, mtbf_s)
    assert float(mean) == pytest.approx(mean_ref, rel=1e-12)
    assert float(var) == pytest.approx(var_ref, rel=1e-9)


def test_moments_finite_and_masked_at_the_exponent_cap():
    args = (1e6, 3e4, 6e3, 9e4 + 1e5, 3600.0)  # (L + R)/M = 63 > MAX_EXPONENT
    mean, var, ok = F.wall_time_moments(*args)
    assert not bool(ok)
    assert np.isfinite(float(mean)) and np.isfinite(float(var))
    grad = jax.grad(lambda tau: F.wall_time_moments(1e6, tau, 6e3, 9e4, 3600.0)[1])(3e4)
    assert np.isfinite(float(grad))


# --- Against the simulator ----------------------------------------------------------------

@pytest.mark.parametrize("i", range(len(GRID)), ids=[g[0] for g in GRID])
def test_mean_and_variance_match_the_simulator(i):
    wall = simulated(i)
    mean, var, ok, _ = analytic()
    assert ok[i]
    assert mean[i] == pytest.approx(wall.mean(), rel=0.01)
    # 10^5 jobs: the sample variance's standard error, sqrt((m4 - s^4) / n) / s^2, is 0.5-0.8 %
    # at these points, so 5 % is over 6 standard errors.
    assert var[i] == pytest.approx(wall.var(), rel=0.05)


@pytest.mark.parametrize("i", range(len(GRID)), ids=[g[0] for g in GRID])
def test_p10_and_p90_match_the_simulator(i):
    p10, p90 = np.quantile(simulated(i), [0.1, 0.9])
    q = analytic()[3][i]
    assert q[0] == pytest.approx(p10, rel=0.03)
    assert q[1] == pytest.approx(p90, rel=0.03)


# --- The distribution's own properties ---------------------------------------------------

LAW_CASES = [  # (solve_s, tau_s, ckpt_s, restart_s, mtbf_s)
    (DAY, YOUNG_SEED_S, 30.0, 640.0, DAY),  # no-failure probability ~ 0.36
    (30000.0, 300.0, 30.0, 120.0, 600.0),
    (1e6, 2000.0, 30.0, 600.0, 1e8),  # no-failure probability ~ 0.99
    (100.0, 1.0, 0.0, 100.0, 1.0),  # masked (exponent 101), still finite
]


QS = np.array([0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999])


@functools.cache
def law_round_trip():
    """Quantiles at QS and the CDF there, for all LAW_CASES in one batched call each."""
    col = [jnp.array([c[k] for c in LAW_CASES])[:, None] for k in range(5)]
    t = quantile(jnp.asarray(QS)[None, :], *col)
    return np.asarray(t), np.asarray(cdf(t, *col))


@pytest.mark.parametrize("i", range(len(LAW_CASES)))
def test_quantile_cdf_round_trip(i):
    solve, tau, ckpt, restart, mtbf = case = LAW_CASES[i]
    free_s = solve / tau * (tau + ckpt)
    p0 = math.exp(-free_s / mtbf)  # no failure in the failure-free time: an atom at free_s
    t, cdf_t = (x[i] for x in law_round_trip())
    on_atom = QS <= p0
    np.testing.assert_allclose(cdf_t[~on_atom], QS[~on_atom], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t[on_atom], free_s, rtol=1e-12)
    np.testing.assert_allclose(cdf_t[on_atom], p0, rtol=1e-9)
    assert np.all(np.diff(t) >= 0)
    below = free_s * np.array([0.0, 0.5, 1 - 1e-9])
    np.testing.assert_array_equal(np.asarray(cdf(jnp.asarray(below), *case)), 0.0)


quantile_grad_tau = jax.jit(jax.grad(F.wall_time_quantile, argnums=2))


@pytest.mark.parametrize("q", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("case", LAW_CASES[:3])
def test_quantile_gradient_in_tau_is_finite_and_right(case, q):
    solve, tau, ckpt, restart, mtbf = case
    grad = float(quantile_grad_tau(q, solve, tau, ckpt, restart, mtbf))
    h = 1e-5 * tau
    fd = float((quantile(q, solve, tau + h, ckpt, restart, mtbf)
                - quantile(q, solve, tau - h, ckpt, restart, mtbf)) / (2 * h))
    assert np.isfinite(grad)
    assert grad == pytest.approx(fd, rel=1e-4, abs=1e-6 * solve / tau)


def test_quantile_jits_and_vmaps():
    cases = jnp.array(LAW_CASES[:3])
    batched = jax.jit(jax.vmap(F.wall_time_quantile, in_axes=(None, 0, 0, 0, 0, 0)))(0.9, *cases.T)
    one_by_one = [float(quantile(0.9, *c)) for c in LAW_CASES[:3]]
    np.testing.assert_allclose(np.asarray(batched), one_by_one, rtol=1e-12)


# --- Seed worked example ----------------------------------------------------------------

def test_young_interval_seed001_by_hand():
    # sqrt(2 x 30 s x 86,400 s) = sqrt(5,184,000 s^2) = 2,276.8 s
    assert float(R.young_interval(30.0, DAY)) == pytest.approx(2276.0, abs=1.0)
