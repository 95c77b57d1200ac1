-- lists.lua: checks of the list arguments (tags, depends, throttles) and the dependency cycle
-- check. A module, not helpers: under EVALSHA every top-level helper is built again by every
-- call, and a put without options (most puts) needs none of these; put loads it at the
-- branch that reads options (Q.need), the other commands by their routes.
--
-- Commands: none (helpers only). Keys: ql:j:<jid>-dependents (EXISTS), ql:j:<jid>-dependencies
-- (SMEMBERS), read by Q.check_cycle. Errors as validate.lua's.

Q.mod.lists = function()
  -- A JSON array argument (tags, depends, throttles): returns a Lua list.
  local function json_list(name, v, maxn)
    local value = Q.json(name, v)
    -- `{}` is accepted as the empty list (cjson's own encoding of one).
    if type(value) ~= 'table' or (next(value) ~= nil and (#value == 0 or v:match('^%s*{'))) then
      Q.fail('Arg "' .. name .. '" must be a JSON array')
    end
    if #value > maxn then Q.fail('Arg "' .. name .. '" has more than ' .. maxn .. ' entries') end
    return value
  end

  function Q.tag_name(t)
    if type(t) ~= 'string' or #t < 1 or #t > 64 or not printable(t) then
      Q.fail('Arg "tags" invalid tag: ' .. tostring(t))
    end
    return t
  end

  -- A JSON list of names, each passed to `check`, duplicates dropped (first kept).
  local function name_list(name, v, maxn, check)
    local out, seen = {}, {}
    for _, t in ipairs(json_list(name, v, maxn)) do
      check(t)
      if not seen[t] then seen[t] = true; tinsert(out, t) end
    end
    return out
  end

  function Q.tags(v)
    if v == '[]' then return {} end  -- the common case: no decoding needed
    return name_list('tags', v, 50, Q.tag_name)
  end

  function Q.depends(v, self_jid)
    if v == '[]' then return {} end  -- the common case: no decoding needed
    local list = json_list('depends', v, Q.MAX_LIST)
    local out, seen = {}, {}
    for _, d in ipairs(list) do
      if type(d) ~= 'string' then Q.fail('Arg "depends" must be a list of jids') end
      Q.jid(d, 'depends')
      if d == self_jid then Q.fail('Arg "depends" invalid: a job cannot depend on itself') end
      if not seen[d] then seen[d] = true; tinsert(out, d) end
    end
    return out
  end

  -- Refuse edges jid -> d that would close a cycle: some d already (transitively) depends on
  -- jid. Read-only, so callers run it with the other checks before their first write. Only a
  -- job that others wait for can be on a cycle, so most calls cost one EXISTS (skipped when
  -- the caller knows `waited_on`). `edges(cur)` lists cur's dependencies (default: stored).
  function Q.check_cycle(jid, deps, edges, waited_on)
    if #deps == 0 then return end
    if not waited_on and rcall('EXISTS', Q.kdents(jid)) == 0 then return end
    local seen, stack, visited = {}, {}, 0
    for i = #deps, 1, -1 do stack[#stack + 1] = deps[i] end
    while #stack > 0 do
      local cur = table.remove(stack)
      if cur == jid then
        Q.fail('Arg "depends" invalid: dependency cycle: ' .. jid .. ' would wait for itself')
      end
      if not seen[cur] then
        seen[cur] = true
        visited = visited + 1
        if visited > Q.MAX_LIST then
          Q.fail('Arg "depends" invalid: more than ' .. Q.MAX_LIST
            .. ' jobs to check for a dependency cycle')
        end
        local next_deps = edges and edges(cur) or rcall('SMEMBERS', Q.kdeps(cur))
        for _, x in ipairs(next_deps) do stack[#stack + 1] = x end
      end
    end
  end

  function Q.throttle_id(t, name)
    if type(t) ~= 'string' or #t < 1 or #t > 128 or not t:match('^[\33-\126]+$') then
      Q.fail('Arg "' .. (name or 'throttles') .. '" invalid throttle id: ' .. tostring(t))
    end
    return t
  end

  function Q.throttles(v)
    return name_list('throttles', v, 10, Q.throttle_id)
  end
end
