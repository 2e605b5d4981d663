// SPDX-License-Identifier: Apache-2.0
// Conntrack's entries over ctnetlink: the dump request with the status filter, and the
// parser of each entry's tuples and status.
#include "ip-masq-agent/conntrack/conntrack_dump.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <array>
#include <cerrno>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include <fmt/format.h>

#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq::netlink {

namespace {

constexpr uint16_t kEntryType = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;

// The attributes of one nest, by type; those past N (a newer kernel's) are skipped. A
// libmnl callback: nothing in it throws.
template<size_t N>
using Attributes = std::array<const nlattr *, N>;

template<size_t N>
int collect(const nlattr *attr, void *data) noexcept
{
	auto &table = *static_cast<Attributes<N> *>(data);
	const uint16_t type = mnl_attr_get_type(attr);
	if (type < N)
		table[type] = attr;
	return MNL_CB_OK;
}

Error malformed(std::string_view what)
{
	return Error(fmt::format("ctnetlink sent a conntrack entry with {}", what), EPROTO);
}

// An attribute of exactly `size` bytes, or an error.
Result<const uint8_t *> payloadOf(const nlattr *attr, size_t size, std::string_view what)
{
	if (mnl_attr_get_payload_len(attr) != size)
		return fail(malformed(fmt::format("{} of {} bytes, not {}", what,
						  mnl_attr_get_payload_len(attr), size)));
	return static_cast<const uint8_t *>(mnl_attr_get_payload(attr));
}

Result<uint16_t> u16Of(const nlattr *attr, std::string_view what)
{
	auto bytes = payloadOf(attr, 2, what);
	if (!bytes)
		return fail(bytes.error());
	return static_cast<uint16_t>((*bytes)[0] << 8 | (*bytes)[1]);
}

struct Tuple {
	std::optional<Address> source, destination;
	std::optional<uint8_t> protocol;
	uint16_t sourcePort = 0, destinationPort = 0; // ICMP: the id as the source port
};

Result<std::optional<Address>> addressOf(const nlattr *attr, Family family)
{
	if (!attr)
		return std::optional<Address>();
	auto bytes = payloadOf(attr, family == Family::ipv4 ? 4 : 16, "an address");
	if (!bytes)
		return fail(bytes.error());
	return std::optional(Address::fromBytes(family, *bytes));
}

Status parseTupleIp(const nlattr *nest, Family family, Tuple &tuple)
{
	Attributes<CTA_IP_MAX + 1> ip{};
	if (mnl_attr_parse_nested(nest, collect<CTA_IP_MAX + 1>, &ip) < 0)
		return fail(malformed("an address nest that overruns it"));
	const bool v4 = family == Family::ipv4;
	auto source = addressOf(ip[v4 ? CTA_IP_V4_SRC : CTA_IP_V6_SRC], family);
	if (!source)
		return fail(source.error());
	auto destination = addressOf(ip[v4 ? CTA_IP_V4_DST : CTA_IP_V6_DST], family);
	if (!destination)
		return fail(destination.error());
	tuple.source = *source;
	tuple.destination = *destination;
	return {};
}

Status parseTupleProto(const nlattr *nest, Tuple &tuple)
{
	Attributes<CTA_PROTO_MAX + 1> proto{};
	if (mnl_attr_parse_nested(nest, collect<CTA_PROTO_MAX + 1>, &proto) < 0)
		return fail(malformed("a protocol nest that overruns it"));
	if (proto[CTA_PROTO_NUM]) {
		auto number = payloadOf(proto[CTA_PROTO_NUM], 1, "a protocol number");
		if (!number)
			return fail(number.error());
		tuple.protocol = (*number)[0];
	}
	// ICMP's id stands where a source port would: it is what NAT translates.
	for (const auto &[type, port, what] :
	     {std::tuple{CTA_PROTO_SRC_PORT, &tuple.sourcePort, "a source port"},
	      std::tuple{CTA_PROTO_DST_PORT, &tuple.destinationPort, "a destination port"},
	      std::tuple{CTA_PROTO_ICMP_ID, &tuple.sourcePort, "an ICMP id"},
	      std::tuple{CTA_PROTO_ICMPV6_ID, &tuple.sourcePort, "an ICMPv6 id"}})
		if (proto[type]) {
			auto value = u16Of(proto[type], what);
			if (!value)
				return fail(value.error());
			*port = *value;
		}
	return {};
}

Result<Tuple> parseTuple(const nlattr *nest, Family family)
{
	Attributes<CTA_TUPLE_MAX + 1> parts{};
	if (mnl_attr_parse_nested(nest, collect<CTA_TUPLE_MAX + 1>, &parts) < 0)
		return fail(malformed("a tuple nest that overruns it"));
	Tuple tuple;
	if (parts[CTA_TUPLE_IP])
		if (auto s = parseTupleIp(parts[CTA_TUPLE_IP], family, tuple); !s)
			return fail(s.error());
	if (parts[CTA_TUPLE_PROTO])
		if (auto s = parseTupleProto(parts[CTA_TUPLE_PROTO], tuple); !s)
			return fail(s.error());
	return tuple;
}

// TCP's state from the CTA_PROTOINFO nest (CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE);
// nullopt when the nest does not carry it (another protocol).
Result<std::optional<uint8_t>> parseTcpState(const nlattr *nest)
{
	Attributes<CTA_PROTOINFO_MAX + 1> info{};
	if (mnl_attr_parse_nested(nest, collect<CTA_PROTOINFO_MAX + 1>, &info) < 0)
		return fail(malformed("a protocol state nest that overruns it"));
	if (!info[CTA_PROTOINFO_TCP])
		return std::optional<uint8_t>();
	Attributes<CTA_PROTOINFO_TCP_MAX + 1> tcp{};
	if (mnl_attr_parse_nested(info[CTA_PROTOINFO_TCP], collect<CTA_PROTOINFO_TCP_MAX + 1>, &tcp) < 0)
		return fail(malformed("a TCP state nest that overruns it"));
	if (!tcp[CTA_PROTOINFO_TCP_STATE])
		return std::optional<uint8_t>();
	auto state = payloadOf(tcp[CTA_PROTOINFO_TCP_STATE], 1, "a TCP state");
	if (!state)
		return fail(state.error());
	return std::optional((*state)[0]);
}

// The socket's error, worded for an operator who reads it in the log or on a terminal.
Error explainedEntriesError(const Error &error)
{
	return explainConntrackError(error, "conntrack's entries");
}

} // namespace

Result<std::optional<ConntrackEntry>> parseConntrackEntry(const nlmsghdr *nlh)
{
	if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)))
		return fail(malformed("no room for its header"));
	// libmnl walks attributes up to the length rounded up to 4 bytes, which the kernel's
	// messages always are: any other length would be read past (found by the fuzzer).
	if (nlh->nlmsg_len != MNL_ALIGN(nlh->nlmsg_len))
		return fail(malformed(fmt::format("a length of {} bytes, not a multiple of 4",
						  nlh->nlmsg_len)));
	if (nlh->nlmsg_type != kEntryType)
		return fail(Error(fmt::format("ctnetlink answered with message type {:#x}, not {:#x}",
					      nlh->nlmsg_type, kEntryType), EPROTO));
	const auto *header = static_cast<const nfgenmsg *>(mnl_nlmsg_get_payload(nlh));
	if (header->nfgen_family != AF_INET && header->nfgen_family != AF_INET6)
		return std::optional<ConntrackEntry>();
	const Family family = header->nfgen_family == AF_INET ? Family::ipv4 : Family::ipv6;
	Attributes<CTA_MAX + 1> top{};
	if (mnl_attr_parse(nlh, sizeof(nfgenmsg), collect<CTA_MAX + 1>, &top) < 0)
		return fail(malformed("attributes that overrun it"));
	if (!top[CTA_TUPLE_ORIG] || !top[CTA_TUPLE_REPLY] || !top[CTA_STATUS])
		return std::optional<ConntrackEntry>();
	auto status = payloadOf(top[CTA_STATUS], 4, "a status");
	if (!status)
		return fail(status.error());
	auto original = parseTuple(top[CTA_TUPLE_ORIG], family);
	if (!original)
		return fail(original.error());
	auto reply = parseTuple(top[CTA_TUPLE_REPLY], family);
	if (!reply)
		return fail(reply.error());
	if (!original->source || !original->protocol || !reply->source || !reply->destination)
		return std::optional<ConntrackEntry>();
	std::optional<uint8_t> tcpState;
	if (top[CTA_PROTOINFO]) {
		auto state = parseTcpState(top[CTA_PROTOINFO]);
		if (!state)
			return fail(state.error());
		tcpState = *state;
	}
	uint32_t bits = 0;
	for (size_t i = 0; i < 4; i++)
		bits = bits << 8 | (*status)[i];
	ConntrackEntry entry;
	entry.family = family;
	entry.protocol = *original->protocol;
	entry.sourceNat = bits & IPS_SRC_NAT;
	entry.originalSource = *original->source;
	entry.originalSourcePort = original->sourcePort;
	entry.destination = *reply->source;
	entry.translatedSource = *reply->destination;
	const bool icmp = entry.protocol == IPPROTO_ICMP || entry.protocol == IPPROTO_ICMPV6;
	// The reply tuple's ICMP id is the translated one; ICMP has no destination port.
	entry.destinationPort = icmp ? 0 : reply->sourcePort;
	entry.translatedPort = icmp ? reply->sourcePort : reply->destinationPort;
	if (entry.protocol == IPPROTO_TCP)
		entry.tcpState = tcpState;
	return std::optional(entry);
}

Result<ConntrackDump> dumpSourceNatEntries(const std::function<void(const ConntrackEntry &)> &onEntry)
{
	auto socket = Socket::open();
	if (!socket)
		return fail(explainedEntriesError(socket.error()));
	if (auto s = socket->setReplyTimeout(kConntrackReplyTimeout); !s)
		return fail(explainedEntriesError(s.error()));
	ConntrackDump dump;
	bool filtered = true;
	// CTA_STATUS with CTA_STATUS_MASK: entries whose status & mask == value, i.e. with
	// IPS_SRC_NAT set (ctnetlink_filter_match). No family (AF_UNSPEC): both families in
	// one walk of the table.
	const auto build = [](nlmsghdr *nlh) {
		mnl_attr_put_u32(nlh, CTA_STATUS, htonl(IPS_SRC_NAT));
		mnl_attr_put_u32(nlh, CTA_STATUS_MASK, htonl(IPS_SRC_NAT));
	};
	auto status = socket->query(
		IPCTNL_MSG_CT_GET, AF_UNSPEC, NLM_F_DUMP, build,
		[&](const nlmsghdr *nlh) -> Status {
			dump.messages++;
			filtered = filtered && (nlh->nlmsg_flags & NLM_F_DUMP_FILTERED);
			auto entry = parseConntrackEntry(nlh);
			if (!entry)
				return fail(entry.error());
			if (!*entry) {
				dump.skipped++;
				return {};
			}
			onEntry(**entry);
			return {};
		},
		NFNL_SUBSYS_CTNETLINK);
	if (!status)
		return fail(explainedEntriesError(status.error()));
	// An empty answer says nothing about the filter; one entry without the flag does.
	dump.kernelFiltered = dump.messages > 0 && filtered;
	return dump;
}

} // namespace ipmasq::netlink
