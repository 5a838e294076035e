"""Network interfaces, from `ip -j -d link`."""

from __future__ import annotations

from healthcheck.core.facts import ProbeContext, provides
from healthcheck.parsers.ip_link import IpLinks, parse_ip_link

IP_LINK = ("ip", "-j", "-d", "link", "show")


@provides("ip_links", "local")
@provides("ip_links", "ssh", prefetch=lambda ctx: [IP_LINK])
def ip_links(ctx: ProbeContext) -> IpLinks:
    result = ctx.run_checked(IP_LINK)
    return ctx.parse(parse_ip_link, result.stdout, "ip -j -d link")
