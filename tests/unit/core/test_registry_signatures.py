"""Facts reach a check by keyword: registration refuses a check whose parameters are not
exactly its declared facts and `limits`, and the engine hands each fact to the parameter
of its name, whatever order `needs=` lists them in."""

from __future__ import annotations

import inspect

import pytest

from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import ProbeContext, ProbeError
from healthcheck.core.registry import DEFAULT, Registry, using
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.runners.local import LocalRunner

# built directly, not declared in the process-wide catalogue (it would leak)
GOT = FindingSpec("sig.E901", "test: what the check was given", "none")


def register(reg: Registry, fn, needs=("ip_links",), optional=(), name="sig.test"):
    return reg.check(name, tier="quick", needs=needs, optional=optional, findings=(GOT,))(fn)


def test_a_check_whose_parameters_are_its_facts_and_limits_registers():
    reg = Registry()

    def fine(ip_links, shared_libs, limits):
        return []

    register(reg, fine, optional=("shared_libs",))

    def keyword_only(*, limits, ip_links):
        return []

    register(reg, keyword_only, name="sig.kwonly")
    assert set(reg.checks) == {"sig.test", "sig.kwonly"}


def test_a_declared_fact_without_a_parameter_of_its_name_is_refused():
    reg = Registry()

    def misnamed(links, limits):  # the fact is ip_links
        return []

    with pytest.raises(TypeError, match=r"check sig\.test .*no parameter for declared fact\(s\) ip_links"):
        register(reg, misnamed)
    assert reg.checks == {}


def test_an_optional_fact_without_a_parameter_is_refused():
    reg = Registry()

    def no_libs(ip_links, limits):
        return []

    with pytest.raises(TypeError, match=r"check sig\.test .*no parameter for declared fact\(s\) shared_libs"):
        register(reg, no_libs, optional=("shared_libs",))


def test_a_parameter_that_names_no_declared_fact_is_refused():
    reg = Registry()

    def extra(ip_links, meminfo, limits):
        return []

    with pytest.raises(TypeError, match=r"check sig\.test .*parameter\(s\) meminfo name no declared fact"):
        register(reg, extra)

    def defaulted(ip_links, limits, verbose=False):  # a default would hide it on every run
        return []

    with pytest.raises(TypeError, match=r"parameter\(s\) verbose name no declared fact"):
        register(reg, defaulted)


def test_a_check_without_limits_is_refused():
    reg = Registry()

    def no_limits(ip_links):
        return []

    with pytest.raises(TypeError, match=r"check sig\.test .*no parameter 'limits'"):
        register(reg, no_limits)

    def limits_misnamed(ip_links, fabric):
        return []

    with pytest.raises(TypeError, match=r"no parameter 'limits'.*parameter\(s\) fabric name no declared fact"):
        register(reg, limits_misnamed)


def test_a_positional_only_parameter_is_refused():
    reg = Registry()

    def positional(ip_links, /, limits):
        return []

    with pytest.raises(TypeError, match=r"check sig\.test .*positional-only parameter\(s\) ip_links"):
        register(reg, positional)

    def limits_positional(ip_links, limits, /):
        return []

    with pytest.raises(TypeError, match=r"positional-only parameter\(s\) ip_links, limits"):
        register(reg, limits_positional)


def test_variadic_parameters_are_refused():
    reg = Registry()

    def star_args(*args):
        return []

    with pytest.raises(TypeError, match=r"no parameter for declared fact\(s\) ip_links.*\*args name no declared"):
        register(reg, star_args)

    def star_kwargs(ip_links, limits, **more):
        return []

    with pytest.raises(TypeError, match=r"\*\*more name no declared fact"):
        register(reg, star_kwargs)


def test_fact_names_must_be_parameter_names_and_declared_once():
    reg = Registry()

    def fine(ip_links, limits):
        return []

    for bad in ("ip-links", "ib.ports", "class", "limits", ""):
        with pytest.raises(ValueError, match=r"check sig\.test: fact name .* cannot be a parameter name"):
            register(reg, fine, needs=(bad,))
    with pytest.raises(ValueError, match=r"check sig\.test: fact\(s\) declared twice in needs/optional: ip_links"):
        register(reg, fine, needs=("ip_links",), optional=("ip_links",))
    assert reg.checks == {}


def test_every_registered_check_takes_exactly_its_facts_and_limits():
    for spec in DEFAULT.all_checks().values():
        params = inspect.signature(spec.fn).parameters
        assert set(params) == {*spec.needs, *spec.optional, "limits"}, spec.name
        assert all(p.kind is not p.POSITIONAL_ONLY for p in params.values()), spec.name


def test_facts_reach_the_parameter_of_their_name_whatever_the_order_of_needs(tmp_path):
    reg = Registry()
    reg.provides("sig_alpha", "local")(lambda ctx: "alpha value")
    reg.provides("sig_beta", "local")(lambda ctx: "beta value")
    reg.provides("sig_gamma", "local")(lambda ctx: "gamma value")

    def failing(ctx):
        raise ProbeError("failed", "no luck")

    reg.provides("sig_missing", "local")(failing)

    # parameters in another order than needs=, optional facts first, limits in the middle
    @reg.check("sig.order", tier="quick", needs=("sig_gamma", "sig_alpha", "sig_beta"),
               optional=("sig_missing",), findings=(GOT,))
    def order(sig_missing, sig_beta, limits, sig_alpha, sig_gamma):
        got = {"sig_alpha": sig_alpha, "sig_beta": sig_beta, "sig_gamma": sig_gamma, "sig_missing": sig_missing,
               "limits": type(limits).__name__}
        yield GOT(Status.PASS, "what it got", value=got)

    node_config = Config(EMBEDDED_DEFAULT).for_node("gpu017")
    with using(reg):
        result, _ = run_checks(node_config, reg.select("quick"), ProbeContext(runner=LocalRunner(), root=tmp_path))
    assert [(c.name, c.status) for c in result.checks] == [("sig.order", Status.PASS)]
    (f,) = result.findings
    assert f.value == {"sig_alpha": "alpha value", "sig_beta": "beta value", "sig_gamma": "gamma value",
                       "sig_missing": None, "limits": "Fabric"}


def _shapes():
    def plain(a, b, limits): ...
    def defaults(a, b=1, *, limits=None): ...
    def kw_only(*, limits, a): ...
    def positional_only(a, /, b, limits): ...
    def star(a, *rest, limits): ...
    def star_star(a, limits, **more): ...
    def everything(a, /, b, *rest, c, limits, **more): ...
    def closure(a, limits):
        return shapes  # a free variable: co_varnames holds only the locals

    def with_locals(a, limits):
        x = a
        y = x
        return y

    shapes = [plain, defaults, kw_only, positional_only, star, star_star, everything, closure, with_locals,
              lambda a, limits: None]
    return shapes


@pytest.mark.parametrize("fn", _shapes(), ids=lambda fn: fn.__name__)
def test_a_functions_parameters_are_read_as_inspect_reads_them(fn):
    """Registration reads a plain function's parameters from its code object (a prologue
    need not import inspect); it must see what inspect.signature sees, kind for kind."""
    from healthcheck.core.registry import _parameters

    kinds = {"POSITIONAL_ONLY": "positional-only", "VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}
    expected = [(p.name, kinds.get(p.kind.name, "keyword")) for p in inspect.signature(fn).parameters.values()]
    assert _parameters("sig.test", fn) == expected


def test_a_wrapped_or_partial_check_is_read_through_inspect():
    import functools

    def inner(ip_links, limits):
        return []

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        return inner(*args, **kwargs)

    reg = Registry()
    register(reg, wrapper)  # inspect follows __wrapped__: the wrapper takes inner's parameters
    assert "sig.test" in reg.checks

    def three(ip_links, extra, limits):
        return []

    with pytest.raises(TypeError, match="extra name no declared fact"):
        register(Registry(), functools.partial(three, extra=1), name="sig.partial")  # extra=1 stays a parameter
