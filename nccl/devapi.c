/* NCCL's device-side API (the nccl_device headers: device communicators, teams, barriers, the
 * LL all-to-all's slots). kcoll has none: the names exist so that a framework that links them
 * loads, and every call fails with ncclInvalidUsage (or an empty answer for the calls that return
 * no result), with a message that names the function. The prototypes follow nccl_device/core.h and
 * friends; the structs they take are opaque here. */
#include <string.h>

#include "nccl_compat.h"

struct ncclTeam {
    int nRanks, rank, stride;
};
typedef struct ncclTeam ncclTeam_t;

static ncclResult_t not_offered(const char *fn)
{
    return nccl_error(ncclInvalidUsage,
                      "%s is part of NCCL's device API, which kcoll does not offer; use the host "
                      "collectives (ncclAllReduce, ...) on device buffers",
                      fn);
}

KCOLL_NCCL_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm);
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm)
{
    (void)comm, (void)reqs, (void)outDevComm;
    return not_offered("ncclDevCommCreate");
}
KCOLL_NCCL_ALIAS(ncclDevCommCreate);

KCOLL_NCCL_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm)
{
    (void)comm, (void)devComm;
    return not_offered("ncclDevCommDestroy");
}
KCOLL_NCCL_ALIAS(ncclDevCommDestroy);

/* Teams: an empty team (no ranks) after the message. */
static ncclTeam_t no_team(const char *fn)
{
    (void)not_offered(fn);
    ncclTeam_t t;
    memset(&t, 0, sizeof(t));
    return t;
}

KCOLL_NCCL_API ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t ncclTeamWorld(ncclComm_t comm)
{
    (void)comm;
    return no_team("ncclTeamWorld");
}
KCOLL_NCCL_ALIAS(ncclTeamWorld);

KCOLL_NCCL_API ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t ncclTeamLsa(ncclComm_t comm)
{
    (void)comm;
    return no_team("ncclTeamLsa");
}
KCOLL_NCCL_ALIAS(ncclTeamLsa);

KCOLL_NCCL_API ncclTeam_t ncclTeamRail(ncclComm_t comm);
ncclTeam_t ncclTeamRail(ncclComm_t comm)
{
    (void)comm;
    return no_team("ncclTeamRail");
}
KCOLL_NCCL_ALIAS(ncclTeamRail);

KCOLL_NCCL_API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank)
{
    (void)comm, (void)team, (void)rank;
    (void)not_offered("ncclTeamRankToWorld");
    return -1;
}
KCOLL_NCCL_ALIAS(ncclTeamRankToWorld);

KCOLL_NCCL_API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank)
{
    (void)comm, (void)team, (void)rank;
    (void)not_offered("ncclTeamRankToLsa");
    return -1;
}
KCOLL_NCCL_ALIAS(ncclTeamRankToLsa);

KCOLL_NCCL_API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                            void *outHandle, void *outReq);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, void *outHandle,
                                             void *outReq)
{
    (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    return not_offered("ncclLsaBarrierCreateRequirement");
}
KCOLL_NCCL_ALIAS(ncclLsaBarrierCreateRequirement);

KCOLL_NCCL_API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team,
                                                            int nBarriers, void *outHandle,
                                                            void *outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             void *outHandle, void *outReq)
{
    (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    return not_offered("ncclGinBarrierCreateRequirement");
}
KCOLL_NCCL_ALIAS(ncclGinBarrierCreateRequirement);

KCOLL_NCCL_API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize)
{
    (void)maxElts, (void)maxEltSize;
    (void)not_offered("ncclLLA2ACalcSlots");
    return 0;
}
KCOLL_NCCL_ALIAS(ncclLLA2ACalcSlots);

KCOLL_NCCL_API ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void *outHandle,
                                                       void *outReq);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void *outHandle, void *outReq)
{
    (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
    return not_offered("ncclLLA2ACreateRequirement");
}
KCOLL_NCCL_ALIAS(ncclLLA2ACreateRequirement);
