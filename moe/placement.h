/* Adaptive expert placement for one MoE layer, as COMET and DeepSeek's
 * EPLB do it: E logical experts on the P ranks of an EP group through
 * E + X physical slots, (E + X) / P on every rank, so that a rank's expert
 * memory does not change when the placement does.  The X extra slots are
 * replicas of the hottest experts; two copies of one expert never share a
 * rank (a rank accumulates an expert's gradient at the expert's offset, so
 * it can hold one copy only).
 *
 * Slots are numbered rank-major: rank r holds slots [r*spr, (r+1)*spr),
 * spr = (E + X) / P, and within a rank the slots hold ascending experts.
 * So slot_rank is the table moecclMoePlanCreate takes (numExperts = slots),
 * and the plan's local experts of rank r are its slots in order.
 *
 * A token's (token, j) choice of logical expert e with c copies goes to
 * copy (global token index + j) % c: the same on every rank, and it splits
 * e's tokens evenly over its copies.
 *
 * Everything here is pure (no library calls) and deterministic: every rank
 * that computes a placement from the same loads gets the same bits.
 * Functions that can fail return -1 with a sentence in err (len bytes;
 * err may be NULL) and leave their outputs untouched. */
#ifndef MOE_PLACEMENT_H_
#define MOE_PLACEMENT_H_

#include <stddef.h>
#include <stdint.h>

typedef struct placement {
  int E, P, X;       /* logical experts, ranks, replicas */
  int slots;         /* E + X */
  int spr;           /* slots per rank, (E + X) / P */
  int* slot_expert;  /* [slots] the logical expert of each slot */
  int* slot_rank;    /* [slots] s / spr: moecclMoePlanCreate's table */
  int* copies;       /* [E] slots holding each expert, 1..P */
  int* first;        /* [E + 1] expert e's slots are expert_slots[first[e] .. first[e+1]) */
  int* expert_slots; /* [slots] by expert, each expert's slots ascending */
} placement_t;

/* Today's placement with X = 0: slot e holds expert e, on rank e / (E/P).
 * With X > 0 the primaries keep their blocks (expert e on rank e*P/E) and
 * replica k (k < X) of expert k % E goes round-robin to the next rank that
 * has room and no copy of it.  pl must be zeroed or a placement (freed and
 * replaced).  Refuses E < 1, P < 1, X < 0, X > E*(P-1) (more than P copies
 * of an expert) and (E+X) % P != 0. */
int placement_default(placement_t* pl, int E, int P, int X, char* err, size_t len);

void placement_free(placement_t* pl);
/* dst (zeroed or a placement, freed and replaced) becomes a copy of src. */
int placement_copy(placement_t* dst, const placement_t* src);
/* 1 when a and b have the same shape and the same expert in every slot. */
int placement_equal(const placement_t* a, const placement_t* b);
/* 0 when pl keeps every rule above (the shape, every expert at least once,
 * ascending distinct experts within a rank, the derived tables consistent),
 * else -1 naming the first broken rule. */
int placement_check(const placement_t* pl, char* err, size_t len);
/* Whether rank r holds a copy of expert e. */
int placement_holds(const placement_t* pl, int r, int e);

/* per_rank[r] = the sum over rank r's slots of load[e] / copies[e], the
 * share of the load each copy gets from placement_route's even split. */
void placement_rank_load(const placement_t* pl, const double* load, double* per_rank);
/* max over ranks / mean over ranks of placement_rank_load; 1 when the
 * total load is 0. */
double placement_imbalance(const placement_t* pl, const double* load);

/* The placement for loads load[E] (tokens routed to each logical expert,
 * e.g. summed over the last steps; >= 0) with X replicas:
 *  1. replicas: X times, one more copy to the expert with the most load per
 *     copy (ties: fewer copies, then the lower id), at most P copies each;
 *  2. slots to ranks by LPT: experts heaviest per copy first (ties: more
 *     copies, then the lower id), each copy to the least-loaded rank with
 *     room and no copy of it (ties: a rank that held the expert in cur,
 *     then the lower rank); when every rank with room already holds it, a
 *     copy of another expert moves from a rank without it to one with room
 *     (this always exists), chosen to keep the two ranks' max lowest;
 *  3. fewer migrations: the ranks are interchangeable in 2, so the new
 *     ranks are renamed to match cur's (greedily, pairs sharing the most
 *     experts first), which moves fewer experts and changes no rank's load;
 *  4. when cur has the same shape (E, P, X), the new placement is adopted
 *     only if its max per-rank load is below (1 - margin) times cur's under
 *     the same loads; otherwise out becomes a copy of cur.
 * cur may be NULL (no preference; always adopted), else must have the same
 * E and P; out must not be cur and must be zeroed or a placement (freed
 * and replaced).  Returns 1 when out differs from cur (or cur is NULL),
 * 0 when out equals cur, -1 for bad input (message). */
int placement_balance(placement_t* out, const placement_t* cur, const double* load, int E, int P,
                      int X, double margin, char* err, size_t len);

/* slot[n][K] = the slot of each (token, j) of expert[n][K] (logical ids;
 * -1 stays -1): copy (first_token + t + j) % copies[e] of expert e, where
 * first_token is the global index of the first of these n tokens.  An id
 * outside [-1, E) gets -1 and the call returns -1 (after filling every
 * slot); else 0. */
int placement_route(const placement_t* pl, const int32_t* expert, int n, int K,
                    long long first_token, int32_t* slot);

/* A rank that newly holds an expert and the rank it gets the expert from. */
typedef struct placement_move {
  int rank;   /* the new holder */
  int expert; /* the logical expert */
  int from;   /* a holder of the expert in the old placement */
} placement_move_t;

/* The moves from old to nw (same E and P; X may differ): every (rank,
 * expert) that nw holds and old does not, ranks ascending then experts
 * ascending; from is the old holder of the expert that has been given the
 * fewest moves so far (ties: the lower rank), so the sends spread over the
 * old copies.  moves has room for nw->slots entries.  Returns the count,
 * or -1 (message) when the shapes differ. */
int placement_moves(const placement_t* old, const placement_t* nw, placement_move_t* moves,
                    char* err, size_t len);

/* The running sum of a run's loads and the periodic rebalance: every
 * `every` steps, each layer's placement from the loads summed since the
 * last rebalance. */
typedef struct placement_tracker {
  int layers, E, P, X;
  int every;     /* steps between rebalances, >= 1 */
  double margin; /* placement_balance's margin */
  int steps;     /* steps summed since the last rebalance */
  double* load;  /* [layers][E] the sums */
} placement_tracker_t;

/* Zero sums for layers layers of E experts on P ranks with X replicas;
 * refuses what placement_default refuses, every < 1, and a margin outside
 * [0, 1). */
int placement_tracker_init(placement_tracker_t* t, int layers, int E, int P, int X, int every,
                           double margin, char* err, size_t len);
void placement_tracker_free(placement_tracker_t* t);
/* Adds one step's counts of layer l: counts[e] (token, j) pairs routed to
 * expert e over the global batch; the router statistics' first E floats
 * after their all-reduce (MOE_STATS_LEN in model.h). */
void placement_tracker_add(placement_tracker_t* t, int layer, const float* counts);
/* Ends a step.  On every `every`-th step: nw[l] = placement_balance(cur[l],
 * the sums of layer l) for every layer, changed[l] its result (1 when nw[l]
 * differs from cur[l]), the sums restart, and the call returns 1; on the
 * other steps it returns 0 and touches nothing; -1 (message) for a bad cur.
 * nw[l] must each be zeroed or a placement. */
int placement_tracker_step(placement_tracker_t* t, const placement_t* cur, placement_t* nw,
                           int* changed, char* err, size_t len);

#endif
