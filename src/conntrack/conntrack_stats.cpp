// SPDX-License-Identifier: Apache-2.0
// Conntrack's statistics over ctnetlink: the per-CPU dump summed, and the global counts.
#include "ip-masq-agent/conntrack/conntrack_stats.h"

#include <arpa/inet.h>
#include <cerrno>
#include <fstream>
#include <string>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq::netlink {

namespace {

// When the possible CPUs cannot be read: the largest NR_CPUS any architecture builds with.
constexpr unsigned kMaxCpus = 8192;

// The message types of the requests and of their answers.
constexpr uint16_t kCpuStatsType = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET_STATS_CPU;
constexpr uint16_t kGlobalStatsType = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET_STATS;

// How many messages the per-CPU dump can hold: the kernel walks the CPU ids below
// nr_cpu_ids, one more than the highest in the possible list ("0-63", "0-3,8-11").
unsigned possibleCpus()
{
	std::ifstream in("/sys/devices/system/cpu/possible");
	std::string list;
	if (!std::getline(in, list))
		return kMaxCpus;
	const size_t last = list.find_last_of("-,");
	const std::string_view highestText =
		std::string_view(list).substr(last == std::string::npos ? 0 : last + 1);
	const std::optional<uint64_t> highest = ascii::parseDecimal(highestText);
	if (!highest || *highest >= kMaxCpus)
		return kMaxCpus;
	return *highest + 1;
}

// The u32 attributes of one statistics message, by type. Types this build does not know
// (a newer kernel's) are skipped.
template<size_t N>
using U32Attributes = std::array<std::optional<uint32_t>, N>;

// A libmnl callback: plain assignments, nothing that throws.
template<size_t N>
int collectU32(const nlattr *attr, void *data) noexcept
{
	auto &values = *static_cast<U32Attributes<N> *>(data);
	const uint16_t type = mnl_attr_get_type(attr);
	if (type >= N)
		return MNL_CB_OK;
	if (mnl_attr_validate(attr, MNL_TYPE_U32) < 0)
		return MNL_CB_ERROR;
	values[type] = ntohl(mnl_attr_get_u32(attr));
	return MNL_CB_OK;
}

template<size_t N>
Result<U32Attributes<N>> u32Attributes(const nlmsghdr *nlh, uint16_t expectedType)
{
	if (nlh->nlmsg_type != expectedType)
		return fail(fmt::format("ctnetlink answered with message type {:#x}, not {:#x}",
					nlh->nlmsg_type, expectedType), EPROTO);
	U32Attributes<N> values{};
	if (mnl_attr_parse(nlh, sizeof(nfgenmsg), collectU32<N>, &values) < 0)
		return fail("ctnetlink sent a statistic that is not a 32-bit number", EPROTO);
	return values;
}

// Adds one CPU's message to the sums.
Status addCpu(const nlmsghdr *nlh, ConntrackStats &stats)
{
	auto values = u32Attributes<CTA_STATS_MAX + 1>(nlh, kCpuStatsType);
	if (!values)
		return fail(values.error());
	for (const ConntrackCounter &counter : kConntrackCounters)
		if (const auto &value = (*values)[counter.attribute]) {
			std::optional<uint64_t> &sum = stats.*counter.value;
			sum = sum.value_or(0) + *value;
		}
	stats.cpus++;
	return {};
}

Status readPerCpu(Socket &socket, ConntrackStats &stats)
{
	const unsigned limit = possibleCpus();
	return socket.query(IPCTNL_MSG_CT_GET_STATS_CPU, AF_UNSPEC, NLM_F_DUMP, nullptr,
			    [&](const nlmsghdr *nlh) -> Status {
				    if (stats.cpus == limit)
					    return fail(fmt::format("ctnetlink sent more per-CPU "
								    "statistics than the {} possible "
								    "CPUs", limit), EPROTO);
				    return addCpu(nlh, stats);
			    },
			    NFNL_SUBSYS_CTNETLINK);
}

Status readGlobal(Socket &socket, ConntrackStats &stats)
{
	return socket.query(IPCTNL_MSG_CT_GET_STATS, AF_UNSPEC, 0, nullptr,
			    [&](const nlmsghdr *nlh) -> Status {
				    auto values = u32Attributes<CTA_STATS_GLOBAL_MAX + 1>(
					    nlh, kGlobalStatsType);
				    if (!values)
					    return fail(values.error());
				    stats.entries = (*values)[CTA_STATS_GLOBAL_ENTRIES];
				    stats.entriesLimit = (*values)[CTA_STATS_GLOBAL_MAX_ENTRIES];
				    return {};
			    },
			    NFNL_SUBSYS_CTNETLINK);
}

// Kernels before CTA_STATS_GLOBAL_MAX_ENTRIES: the sysctl, which every namespace can read
// (outside the initial one it is read-only, and the same global value).
std::optional<uint64_t> limitFromSysctl()
{
	std::ifstream in("/proc/sys/net/netfilter/nf_conntrack_max");
	uint64_t value = 0;
	if (in >> value)
		return value;
	return std::nullopt;
}

// The socket's error, worded for an operator who reads it in the log.
Error explainedStatsError(const Error &error)
{
	return explainConntrackError(error, "conntrack statistics");
}

} // namespace

Result<ConntrackStats> readConntrackStats()
{
	auto socket = Socket::open();
	if (!socket)
		return fail(explainedStatsError(socket.error()));
	if (auto s = socket->setReplyTimeout(kConntrackReplyTimeout); !s)
		return fail(explainedStatsError(s.error()));
	ConntrackStats stats;
	if (auto s = readPerCpu(*socket, stats); !s)
		return fail(explainedStatsError(s.error()));
	if (auto s = readGlobal(*socket, stats); !s)
		return fail(explainedStatsError(s.error()));
	if (!stats.entriesLimit)
		stats.entriesLimit = limitFromSysctl();
	if (stats.entriesLimit == uint64_t{0})
		stats.entriesLimit.reset(); // no limit
	return stats;
}

} // namespace ipmasq::netlink
