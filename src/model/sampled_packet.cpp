// SPDX-License-Identifier: Apache-2.0
#include "ip-masq-agent/model/sampled_packet.h"

#include <array>
#include <utility>

#include <netinet/in.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

// The transport protocols a port belongs to, as nft and iptables name them.
constexpr std::array<std::pair<const char *, uint8_t>, 5> kProtocols = {{
	{"tcp", IPPROTO_TCP}, {"udp", IPPROTO_UDP}, {"sctp", IPPROTO_SCTP}, {"udplite", IPPROTO_UDPLITE},
	{"dccp", IPPROTO_DCCP},
}};

} // namespace

std::string PortProtocol::toString() const
{
	for (const auto &[name, number] : kProtocols)
		if (number == protocol)
			return fmt::format("{}/{}", port, name);
	return fmt::format("{}/{}", port, protocol);
}

std::string SampledPacket::toString() const
{
	std::string out = destination.toString();
	if (source)
		out += " from " + source->toString();
	if (outputInterface)
		out += " through " + escaped(*outputInterface);
	if (transport)
		out += " port " + transport->toString();
	return out;
}

Address firstSampledHost(Family family)
{
	return Address{family, family == Family::ipv4 ? 1u : 2u};
}

Result<PortProtocol> parsePortProtocol(const std::string &text)
{
	const auto usage = [&text](const char *what) {
		return fail(fmt::format("{} {}: write PORT/PROTOCOL, e.g. 443/tcp (protocols: tcp, udp, sctp, "
					"udplite, dccp)", quoted(text), what));
	};
	const size_t slash = text.find('/');
	if (slash == std::string::npos)
		return usage("has no protocol");
	const std::optional<uint64_t> port = ascii::parseDecimal(std::string_view(text).substr(0, slash));
	if (!port || *port == 0 || *port > 65535)
		return usage("is not a port from 1 to 65535");
	const std::string name = text.substr(slash + 1);
	for (const auto &[protocol, number] : kProtocols)
		if (name == protocol)
			return PortProtocol{number, static_cast<uint16_t>(*port)};
	return usage("names no protocol with ports");
}

} // namespace ipmasq
