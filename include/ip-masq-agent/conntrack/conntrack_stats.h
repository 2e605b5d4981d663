// SPDX-License-Identifier: Apache-2.0
// Connection tracking's health, read over ctnetlink as `conntrack -S` and `conntrack -C`
// read it: the per-CPU statistics summed, the entry count and its limit.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include <linux/netfilter/nfnetlink_conntrack.h>

#include "ip-masq-agent/base/error.h"

namespace ipmasq::netlink {

// One reading, of the network namespace the calling thread is in (the kernel keeps these
// per namespace; with hostNetwork that is the node's). A statistic the kernel did not
// send is nullopt, never a made-up zero: kernels add statistics over time (clash_resolve
// and chaintoolong are recent), and a statistic this kernel does not keep must not read
// as "none happened".
struct ConntrackStats {
	// The per-CPU statistics, each summed over every CPU the kernel reported. The
	// kernel counts each in 32 bits per CPU, so a sum drops back when one CPU's count
	// wraps (as `conntrack -S` shows it too); Prometheus takes that for a reset.
	std::optional<uint64_t> found;
	std::optional<uint64_t> invalid;
	std::optional<uint64_t> insert;
	std::optional<uint64_t> insertFailed;
	std::optional<uint64_t> drop;
	std::optional<uint64_t> earlyDrop;
	std::optional<uint64_t> error;
	std::optional<uint64_t> searchRestart;
	std::optional<uint64_t> clashResolve;
	std::optional<uint64_t> chainTooLong;
	// How many per-CPU messages were summed (the kernel sends one per possible CPU).
	unsigned cpus = 0;

	// Entries in the table now, as `conntrack -C` counts them.
	std::optional<uint64_t> entries;
	// nf_conntrack_max: from the kernel's answer, else read from
	// /proc/sys/net/netfilter/nf_conntrack_max; nullopt when neither tells, or when it
	// is 0, which the kernel takes for "no limit".
	std::optional<uint64_t> entriesLimit;

	bool operator==(const ConntrackStats &) const = default;
};

// One per-CPU statistic: its name in the agent's metrics, as the kernel names it (the
// key `conntrack -S` prints), its netlink attribute, where it lives in ConntrackStats,
// and what it counts. One table, so that a statistic is parsed, exported and tested
// together or not at all.
struct ConntrackCounter {
	std::string_view name; // the metric is ip_masq_agent_conntrack_<name>_total
	std::string_view kernelName;
	uint16_t attribute; // CTA_STATS_*
	std::optional<uint64_t> ConntrackStats::*value;
	std::string_view meaning;
};

// Every per-CPU statistic the kernel sends, in `conntrack -S` order.
inline constexpr std::array kConntrackCounters{
	ConntrackCounter{"found", "found", CTA_STATS_FOUND,
			 &ConntrackStats::found,
			 "Lookups that found a tuple in use (today: NAT trying a source port that "
			 "another connection holds)."},
	ConntrackCounter{"invalid", "invalid", CTA_STATS_INVALID,
			 &ConntrackStats::invalid,
			 "Packets conntrack could not track (no valid state: malformed, or TCP "
			 "outside any known connection)."},
	ConntrackCounter{"insert", "insert", CTA_STATS_INSERT,
			 &ConntrackStats::insert,
			 "Entries inserted from userspace over ctnetlink (conntrack -I, "
			 "conntrackd); older kernels also counted every new connection."},
	ConntrackCounter{"insert_failed", "insert_failed", CTA_STATS_INSERT_FAILED,
			 &ConntrackStats::insertFailed,
			 "New connections whose entry could not be inserted (a clash with an "
			 "entry made meanwhile, or a hash chain too long); their packet was dropped."},
	ConntrackCounter{"drop", "drop", CTA_STATS_DROP,
			 &ConntrackStats::drop,
			 "Packets dropped by conntrack: the table was full, an insert failed, or "
			 "the protocol tracker refused the packet."},
	ConntrackCounter{"early_drop", "early_drop", CTA_STATS_EARLY_DROP,
			 &ConntrackStats::earlyDrop,
			 "Entries not yet assured (no reply seen) evicted to make room in a full "
			 "table."},
	ConntrackCounter{"error", "error", CTA_STATS_ERROR,
			 &ConntrackStats::error,
			 "ICMP and ICMPv6 packets conntrack found erroneous (malformed, or an error "
			 "about no known connection)."},
	ConntrackCounter{"search_restart", "search_restart", CTA_STATS_SEARCH_RESTART,
			 &ConntrackStats::searchRestart,
			 "Table lookups restarted because the table changed under them (an entry "
			 "moved, or the table was resized)."},
	ConntrackCounter{"clash_resolve", "clash_resolve", CTA_STATS_CLASH_RESOLVE,
			 &ConntrackStats::clashResolve,
			 "Insert clashes (two packets of one new flow on two CPUs) resolved "
			 "without a drop."},
	ConntrackCounter{"chain_too_long", "chaintoolong", CTA_STATS_CHAIN_TOOLONG,
			 &ConntrackStats::chainTooLong,
			 "Inserts refused because a hash chain was too long (a hash flood, or a "
			 "table far too small); their packet was dropped."},
};

// Reads the statistics over a NETLINK_NETFILTER socket of its own (opened and closed per
// call: a few microseconds, at the daemon's rate of one read every few seconds): the
// per-CPU dump (IPCTNL_MSG_CT_GET_STATS_CPU) and the global counts
// (IPCTNL_MSG_CT_GET_STATS).
//
// nfnetlink refuses every request without CAP_NET_ADMIN in the user namespace that owns
// the network namespace (EPERM), the same capability nf_tables needs; a seccomp filter or
// a security module may refuse it too (EPERM, EACCES), and the error then says so rather
// than blaming the capability (refusal.h). The kernel may load nf_conntrack_netlink on the
// first request, as it does for `conntrack -S`.
//
// Bounded: each answer within 1 s (ETIMEDOUT), and a dump of more messages than the
// machine has possible CPUs is refused (EPROTO). A kernel without conntrack's netlink
// interface (nf_conntrack_netlink neither built in nor loadable) fails at once with the
// kernel's EINVAL; a namespace whose conntrack has seen no packet yet reads as zeros.
Result<ConntrackStats> readConntrackStats();

} // namespace ipmasq::netlink
