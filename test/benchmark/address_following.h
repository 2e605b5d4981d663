// SPDX-License-Identifier: Apache-2.0
// Benchmark section 11: what following the node's addresses costs per burst of changes,
// beside 5,000 other addresses, against reading them all again as the agent used to.
#pragma once

#include <string>
#include <vector>

namespace ipmasq::bench {

struct AddressBurstRow {
	size_t changes = 0; // notifications in the burst (address additions and removals)
	double followMs = 0; // drain + apply, wall time (median)
	double followCpuMs = 0; // its CPU time (median)
	double rereadMs = 0; // one read of every address and link (median), what each burst cost before
	size_t overruns = 0; // bursts the monitor's queue did not hold
};

struct AddressFollowingFigures {
	size_t addresses = 0; // on the node while measuring
	double readUnnamedMs = 0; // one RTM_GETADDR dump (median)
	double readNamedMs = 0; // the same plus the RTM_GETLINK dump for names (median)
	std::vector<AddressBurstRow> bursts;
	double chooseMs = 0; // the view's addresses and the pick in the subnet (median)
	// While addresses flap as fast as `ip` changes them: reads of every address that gave
	// up (interrupted five times), of how many.
	size_t readsFailedUnderFlapping = 0;
	size_t readsUnderFlapping = 0;
	size_t notificationsUnderFlapping = 0;
	double followCpuUnderFlappingMs = 0; // all of them drained and applied
	// The agent as a process with an outputAddress subnet, through pod-like churn (veths,
	// addresses, routes) and address flapping: its CPU per 1,000 notifications, its
	// commits (table re-made) during the churn.
	double agentCpuMsPer1000 = -1;
	long agentCommits = -1;
	std::string skipped; // why the agent part did not run, if it did not
};

// Runs in the benchmark's private network namespace; `scratch` holds the batch files.
AddressFollowingFigures measureAddressFollowing(const std::string &scratch);
void printAddressFollowing(const AddressFollowingFigures &figures);

} // namespace ipmasq::bench
