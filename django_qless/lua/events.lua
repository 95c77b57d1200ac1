-- events.lua: what a call tells others: event payloads on the log and worker channels, the
-- wake-ups of idle workers (with the hand-off of ready jobs, handoff.lua) and the timers idle
-- workers must learn of. Published once per call, at its end (Q.flush_wake, Q.flush_timers).
--
--@ helpers
--
-- Commands: none (helpers only).
-- Keys and channels:
--   ql:wake:<queue>                channel  queue name, published once per call per queue
--   ql:idle:<queue>                zset     idle workers waiting for a hand-off (handoff.lua)
--   ql:log, ql:w:<worker>, ql:<event>  channels (PUBLISH)

-- ---------------------------------------------------------------- events

-- JSON text of a string (or false), escaped exactly as cjson does it.
local function js(v)
  if v == false or v == nil then return 'false' end
  return cjson_encode(v)
end
Q.js = js

function Q.publish(channel, payload)
  rcall(K.pub, channel, payload)
end

function Q.ev_put(jid, queue)
  return '{"jid":' .. js(jid) .. ',"event":"put","queue":' .. js(queue) .. '}'
end

function Q.ev_lock_lost(jid, worker)
  return '{"jid":' .. js(jid) .. ',"event":"lock_lost","worker":' .. js(worker) .. '}'
end

function Q.ev_failed(jid, worker, group, message)
  return '{"message":' .. js(message) .. ',"jid":' .. js(jid) .. ',"group":' .. js(group)
    .. ',"event":"failed","worker":' .. js(worker) .. '}'
end

-- Tell the old owner and the log that a job's lock is gone.
function Q.lock_lost(jid, worker)
  local payload = Q.ev_lock_lost(jid, worker)
  rcall(K.pub, KP .. 'w:' .. worker, payload)
  rcall(K.pub, K.log, payload)
end

-- Note that jobs became ready in a queue; published once per call (Q.flush_wake).
function Q.wake(queue)
  local marks = K.empty  -- (the queue is no longer known empty: queuescan.lua)
  if marks and marks[queue] then marks[queue] = nil; K.mark_gen = (K.mark_gen or 0) + 1 end
  local woken = ctx.woken
  if not woken[queue] then
    woken[queue] = true
    local list = ctx.woken_list
    list[#list + 1] = queue
  end
end

local NO_IDLE = {}
-- The queues Q.flush_wake published this call, for Q.flush_timers: one table emptied after
-- each use (`dirty` until then, so a call that raised meanwhile leaves none behind).
local sent, dirty = {}, false

-- Publish the wake-ups noted during this call. First, ready jobs go straight to the idle
-- workers waiting on the queue (handoff.lua); a queue left with no ready job needs no wake-up.
function Q.flush_wake(now)
  local list = ctx.woken_list
  if not list[1] then
    if ctx.timer_list[1] then Q.flush_timers(now, nil) end
    return
  end
  local woken = ctx.woken
  if dirty then sent, dirty = {}, false end
  -- Queues known to have no idle worker registered (K.noidle[queue] = until when, under the
  -- generation tag K.noidle_tag): a call that read the tag (every put does) skips the idle
  -- lookup of such a queue. Q.idle_register drops the queues it registers on, so this is exact
  -- for this engine; a registration by another writer is seen within Q.HORIZON (its worker
  -- gets the wake-up meanwhile, as when no hand-off happens).
  local cfgv = ctx.cfgv
  local tag = cfgv and cfgv['#marks']
  local none = tag and K.noidle_tag == tag and K.noidle or nil
  local pub, wake_prefix = K.pub, KP .. 'wake:'
  local n = #list
  for i = 1, n do
    local queue = list[i]
    local till = none and none[queue]
    local idle
    if till and now < till and till <= now + Q.HORIZON then
      idle = NO_IDLE
    else
      idle = rcall('ZRANGEBYSCORE', KP .. 'idle:' .. queue, now, '+inf', 'LIMIT', 0, 10)
      if tag and #idle == 0 then
        if not none or (K.nnoidle or 0) >= 256 then
          none = {}; K.noidle, K.noidle_tag, K.nnoidle = none, tag, 0
        end
        if not none[queue] then K.nnoidle = K.nnoidle + 1 end
        none[queue] = now + Q.HORIZON
      end
    end
    local ready = true
    if #idle > 0 then
      -- The hand-off's pops may wake queues (an expired lock put back): they go to a fresh
      -- batch, published below without a second hand-off round.
      if ctx.woken_list == list then ctx.woken, ctx.woken_list = {}, {} end
      Q.need(HANDOFF_MODS)
      Q.hand_off(now, queue, idle)
      -- (a queue whose rate limit is full has nothing ready, whatever waits in it)
      ready = not (ctx.rl and ctx.rl.open[queue]) and rcall('ZCARD', Q.kq(queue, 'work')) > 0
    end
    if ready then
      dirty = true
      sent[queue] = true
      rcall(pub, wake_prefix .. queue, queue)
    end
  end
  for i = n, 1, -1 do woken[list[i]] = nil; list[i] = nil end  -- (emptied in place)
  -- Queues woken by those pops (an expired lock put back), without a second hand-off round.
  local more = ctx.woken_list
  if more ~= list then
    woken = ctx.woken
    for i = 1, #more do
      local queue = more[i]
      dirty = true
      sent[queue] = true
      rcall(pub, wake_prefix .. queue, queue)
    end
    for i = #more, 1, -1 do woken[more[i]] = nil; more[i] = nil end
  end
  -- (after the hand-offs: their pops take locks)
  if ctx.timer_list[1] then Q.flush_timers(now, dirty and sent or nil) end
  if dirty then
    for queue in next, sent do sent[queue] = nil end
    dirty = false
  end
end

-- A timer due at `at` was written on `queue`: note it for Q.flush_timers. `slack` nil: a
-- scheduled job or a recurring job's next spawn; a number: a lock, which idle workers may learn
-- of `slack` late (its grace period, which the engine grants a silent owner anyway).
function Q.note_timer(queue, at, slack)
  local first, sched, lock = ctx.timer_at, ctx.timer_sched, ctx.timer_lock
  if first[queue] == nil then
    tinsert(ctx.timer_list, queue)
    first[queue] = at
  elseif at < first[queue] then
    first[queue] = at
  end
  if slack == nil then
    if not sched[queue] or at < sched[queue] then sched[queue] = at end
  elseif not lock[queue] or at + slack < lock[queue] then
    lock[queue] = at + slack
  end
end

-- Wake a queue's idle workers (once per call; `sent`: queues already woken) for a timer noted
-- this call that they would learn of too late, if no earlier timer is pending (that one they
-- learned when they registered). An idle worker reserves again, and so learns the queue's
-- earliest timer, before its registration lapses. A scheduled job or spawn is news when one
-- registration lasts past it (every idle worker should know: any of them may take the job); a
-- lock when every registration does (one worker that reserves by then handles its expiry).
function Q.flush_timers(now, sent)
  local list, first, sched, lock = ctx.timer_list, ctx.timer_at, ctx.timer_sched, ctx.timer_lock
  for i, queue in ipairs(list) do
    if not (sent and sent[queue]) then
      local key, news = KP .. 'idle:' .. queue, false
      if sched[queue] then
        local after = '(' .. string.format('%.17g', math.max(now, sched[queue]))
        news = rcall('ZRANGEBYSCORE', key, after, '+inf', 'LIMIT', 0, 1)[1] ~= nil
      end
      if not news and lock[queue] then
        local soonest = rcall('ZRANGEBYSCORE', key, now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
        news = soonest ~= nil and tonumber(soonest) > lock[queue]
      end
      if news then
        for _, kind in ipairs({ 'locks', 'recur', 'scheduled', 'ratelimited' }) do
          local head = tonumber(rcall('ZRANGE', Q.kq(queue, kind), 0, 0, 'WITHSCORES')[2])
          if head and head < first[queue] then news = false; break end
        end
      end
      if news then rcall(K.pub, KP .. 'wake:' .. queue, queue) end
    end
    -- (emptied in place: a pop notes its lock on every call)
    list[i], first[queue], sched[queue], lock[queue] = nil, nil, nil, nil
  end
end
