"""Network interfaces, from `ip -j -d link`."""

from __future__ import annotations

from healthcheck.core.facts import ProbeContext, ProbeError, provides
from healthcheck.parsers.ip_link import IpLinks, parse_ip_link

IP_LINK = ("ip", "-j", "-d", "link", "show")


@provides("ip_links", "local")
@provides("ip_links", "ssh", prefetch=lambda ctx: [IP_LINK])
def ip_links(ctx: ProbeContext) -> IpLinks:
    result = ctx.run_checked(IP_LINK)
    links = ctx.parse(parse_ip_link, result.stdout, "ip -j -d link")
    if not links.links:
        # every network namespace has lo: an empty list is output that could not be
        # read, and judged it would FAIL every required interface as missing
        raise ProbeError("unparsable", "ip -j -d link listed no interface, not even lo",
                         (result.stdout + result.stderr)[-2000:] or None)
    return links
