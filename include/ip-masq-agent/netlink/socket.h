// SPDX-License-Identifier: Apache-2.0
// A netlink socket (netfilter, or rtnetlink for the node's addresses): sequence numbers,
// port id, buffer sizing, requests, dumps, multicast notifications, and nf_tables
// batches with every acknowledgement collected.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <linux/netfilter/nfnetlink.h>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/batch.h"
#include "ip-masq-agent/netlink/handles.h"

struct nlattr;
struct nlmsghdr;

namespace ipmasq::netlink {

// The attributes in [begin, end), by type into `table` (maxType + 1 entries): the last of a
// type wins, as in the kernel's own parsing, and types above `maxType` are skipped.
void collectAttributes(const void *begin, const void *end, const nlattr **table, uint16_t maxType);
// The same for a message's attributes, after its family header of `headerSize` bytes.
void collectAttributes(const nlmsghdr *nlh, size_t headerSize, const nlattr **table, uint16_t maxType);

// What the kernel answered to one batch.
struct BatchAnswer {
	struct Failure {
		uint32_t seq; // the failed message
		int error; // a positive errno
		std::string detail; // the kernel's extended ack message, if it gave one
	};
	std::vector<Failure> failures; // in batch order: the first is usually the cause
	size_t acknowledged = 0; // messages the kernel accepted
	std::optional<uint32_t> generation; // from the commit's NEWGEN, when echoed
};

// Called for every reply message of a request or dump; an error stops the exchange.
using ReplyHandler = std::function<Status(const nlmsghdr *)>;
// Fills in the payload of a request after its header.
using RequestBuilder = std::function<void(nlmsghdr *)>;

// The netlink families the agent speaks. Each request starts with its family's header.
enum class Protocol {
	netfilter, // nf_tables: an nfgenmsg
	route, // rtnetlink: an rtgenmsg, which every dump of links and addresses accepts
};

// What drainNotifications() met besides the messages it passed on.
struct Drained {
	bool overrun = false; // the kernel dropped notifications (ENOBUFS): we read too slowly
	bool bounded = false; // it stopped at its bound, not because nothing was left
};

class Socket
{
public:
	// A socket bound to an automatic port id, with extended acks (the kernel's own
	// words on errors) and capped acks (errors do not echo whole messages back).
	static Result<Socket> open(Protocol protocol = Protocol::netfilter);

	// How long the kernel may take to answer, per reply (SO_RCVTIMEO) and for the
	// rest of a batch's answers. nf_tables answers inside our own send and receive
	// calls: a batch of 100,000 CIDRs is committed within the sendmsg() (about 0.25 s,
	// under 1 s on a loaded node), and a dump comes as datagrams of at most 32 KiB,
	// each built in the recv() that asks for it. So 10 s only ever expires on a
	// kernel that is stuck. Then the exchange fails with ETIMEDOUT ("nf_tables did
	// not answer within 10 s") instead of blocking the daemon's loop forever, and the
	// socket stays usable: whatever the kernel sends later to the abandoned exchange
	// is discarded.
	static constexpr std::chrono::milliseconds kDefaultReplyTimeout{10000};
	// Sets SO_RCVTIMEO and SO_SNDTIMEO (open() sets kDefaultReplyTimeout). Positive.
	// Reads that never block (receivePending(), the change monitor's) are unaffected.
	Status setReplyTimeout(std::chrono::milliseconds timeout);

	int fd() const;
	uint32_t portId() const { return portId_; }
	// The next sequence number this socket will use.
	uint32_t sequence() const { return seq_; }

	// Grow the socket buffers to at least these sizes. The send buffer must hold a
	// whole batch, which the kernel only takes as one datagram; the receive buffer must
	// hold every acknowledgement, which the kernel queues before we read any.
	// CAP_NET_ADMIN may exceed the sysctl limits (SO_*BUFFORCE); without it we try
	// the plain options.
	Status reserveBuffers(size_t sendBytes, size_t receiveBytes);

	// Receive the multicast group's notifications (e.g. NFNLGRP_NFTABLES,
	// RTNLGRP_IPV4_IFADDR).
	Status joinGroup(unsigned group);
	Status leaveGroup(unsigned group);

	// Sends the batch in one sendmsg() and collects all acknowledgements and errors.
	// Fails only if the exchange itself failed (the answer then is unknown).
	Result<BatchAnswer> sendBatch(const Batch &batch);

	// One request, `family` in its family header: NLM_F_ACK is added unless `flags`
	// has NLM_F_DUMP. Each reply goes to `onReply`; returns once the kernel
	// acknowledged or finished the dump. A kernel error comes back as an Error with
	// its errno (EINTR: a dump was interrupted by a concurrent change).
	// A reply to any other sequence number (left over from an exchange that failed or
	// timed out) is skipped. No reply within the reply timeout: ETIMEDOUT.
	// `type` is a message type of `subsystem` (NFT_MSG_* of nf_tables unless told,
	// IPCTNL_MSG_* of NFNL_SUBSYS_CTNETLINK, ...).
	Status query(uint16_t type, uint16_t family, uint16_t flags, const RequestBuilder &build,
		     const ReplyHandler &onReply, uint8_t subsystem = NFNL_SUBSYS_NFTABLES);

	// Dumps that a concurrent change interrupts (NLM_F_DUMP_INTR) go on instead of failing
	// with EINTR: for a reader that learns from notifications which
	// objects changed, and whose dumps are filtered to one table (the kernel then counts
	// its place in the dump among that table's objects only, so another table's changes
	// cannot make it skip or repeat one). Off by default.
	void tolerateInterruptedDumps(bool tolerate) { toleratesInterruptedDumps_ = tolerate; }

	// Reads one datagram without blocking into the internal buffer and passes each
	// message to `onMessage`. Returns false when nothing was pending.
	Result<bool> receivePending(const std::function<void(const nlmsghdr *)> &onMessage);

	// Reads every pending notification without blocking, but at most `maxDatagrams`
	// datagrams, so that a peer changing things faster than we read cannot keep the
	// caller here: what is left keeps the descriptor readable, and the caller's poll()
	// comes back for it. An overrun (ENOBUFS) is reported, not failed: the queue
	// behind it is intact.
	Result<Drained> drainNotifications(const std::function<void(const nlmsghdr *)> &onMessage,
					   size_t maxDatagrams);

private:
	Socket(Protocol protocol, MnlSocketPtr socket, uint32_t portId, uint32_t seq);

	// Drops replies to earlier exchanges that ended early, so that they cannot be
	// mistaken for answers to the next one.
	void discardPending();
	// The netlink header and the protocol's family header of a request.
	nlmsghdr *putHeader(char *buffer, uint16_t type, uint16_t family, uint16_t flags,
			    uint32_t seq) const;
	Status growBuffer(int option, int forceOption, size_t bytes);
	// The acknowledgements and errors of a batch just sent, and its generation.
	Result<BatchAnswer> collectAnswers(const Batch &batch);
	Error timedOut(const std::string &detail = {}) const;
	// Takes NLM_F_DUMP_INTR off the messages of the datagram in the buffer.
	void clearInterruptions(ssize_t length);

	Protocol protocol_;
	MnlSocketPtr socket_;
	uint32_t portId_;
	uint32_t seq_;
	std::chrono::milliseconds replyTimeout_ = kDefaultReplyTimeout;
	std::vector<char> buffer_;
	bool toleratesInterruptedDumps_ = false;
};

// A fault hook for the integration tests (daemon_faults_test.cpp), set from the environment
// before the daemon starts (modes.cpp): while a file is at `path`, every read of a change
// monitor (nf_tables', the addresses') fails, and so does every attempt to open one. The
// monitors' read error, which the kernel gives no test a way to cause, on demand.
void failMonitorsWhileFileExists(std::string path);
// The injected error while that file exists; success otherwise (and without the hook).
Status injectedMonitorFault();

} // namespace ipmasq::netlink
