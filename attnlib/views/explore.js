/* The attention explorer's script (attnlib/views/explore.py): attnx(id) starts the view whose root
   element has that id; state (layer, head, step, the shown and the pinned query) -> lines, numbers,
   table. Chapter 10's live model calls it too (live.js). Python fills in __ROW__ (a token's row, in
   CSS pixels) and __W__ (the lines' width) and sends the page this file without this comment. */
function attnx(id){
var root=document.getElementById(id);if(!root||root.dataset.ready)return;root.dataset.ready="1";
var D=JSON.parse(root.querySelector(".attnx-data").textContent),R=__ROW__,X=__W__;
var qs=[].slice.call(root.querySelectorAll(".attnx-q")),ks=[].slice.call(root.querySelectorAll(".attnx-k"));
var g=root.querySelector(".attnx-lines g"),body=root.querySelector(".attnx-table tbody");
var which=root.querySelector(".attnx-which"),layer=root.querySelector(".attnx-layer");
var head=root.querySelector(".attnx-head"),step=root.querySelector(".attnx-step");
var stepLabel=root.querySelector(".attnx-step-label");
var st={l:0,h:head?-1:0,s:D.w.length-1,show:-1,pin:-1};
function esc(t){var e=document.createElement("span");e.textContent=t;return e.innerHTML;}
function heads(){var n=D.w[0][0].length,a=[];for(var h=0;h<n;h++)if(st.h<0||st.h===h)a.push(h);return a;}
function w(h,i,j){return D.w[st.s][st.l][h][i][j]/D.scale;}
function ok(i,j){var M=D.mask;if(M&&Array.isArray(M[0][0]))M=M[st.s];return !M||M[i][j]===1;}
function draw(){
  var i=st.show>=0?st.show:st.pin,hs=heads(),rows=i>=0?[i]:qs.map(function(_,r){return r;}),out=[];
  hs.forEach(function(h){rows.forEach(function(r){ks.forEach(function(_,j){
    var v=w(h,r,j),d=hs.length>1?(h-(hs.length-1)/2)*1.5:0;if(!ok(r,j)||v<=0)return;
    out.push('<line x1="2" y1="'+((r+.5)*R+d)+'" x2="'+(X-2)+'" y2="'+((j+.5)*R+d)+'" stroke="'+D.colors[h]+
      '" stroke-opacity="'+(i>=0?v:v/2).toFixed(3)+'" stroke-width="'+(1+(i>=0?4:2)*v).toFixed(2)+'"/>');});});});
  g.innerHTML=out.join("");
  qs.forEach(function(q,r){q.classList.toggle("attnx-on",r===i);q.setAttribute("aria-pressed",String(r===st.pin));});
  ks.forEach(function(k,j){var m=i>=0&&!ok(i,j);k.classList.toggle("attnx-masked",m);
    k.querySelector(".attnx-v").textContent=i<0||hs.length>1?"":m?D.text.masked:w(hs[0],i,j).toFixed(2);});
  which.textContent=i>=0?qs[i].textContent:"\u2013";
  body.innerHTML=i<0?"":hs.map(function(h){
    return '<tr data-head="'+h+'"><th scope="row"><span class="attnx-sw" style="background:'+D.colors[h]+
      '"></span>'+esc(D.heads[h])+"</th>"+ks.map(function(_,j){return ok(i,j)?'<td data-key="'+j+'">'+
      w(h,i,j).toFixed(2)+"</td>":'<td data-key="'+j+'" class="attnx-masked">'+esc(D.text.masked)+"</td>";
    }).join("")+"</tr>";}).join("");
}
function focusQ(r){if(r<0||r>=qs.length)return;qs.forEach(function(q,k){q.tabIndex=k===r?0:-1;});qs[r].focus();}
qs.forEach(function(q,r){
  q.addEventListener("mouseenter",function(){st.show=r;draw();});
  q.addEventListener("mouseleave",function(){st.show=-1;draw();});
  q.addEventListener("focus",function(){qs.forEach(function(o,k){o.tabIndex=k===r?0:-1;});st.show=r;draw();});
  q.addEventListener("blur",function(){st.show=-1;draw();});
  // a second click or tap unpins and hides the row (a touch screen's emulated hover would keep it shown);
  // Enter on a focused query (a click with detail 0) unpins and keeps showing the focused row
  q.addEventListener("click",function(e){if(st.pin===r){st.pin=-1;if(e.detail)st.show=-1;}else st.pin=r;draw();});
  q.addEventListener("keydown",function(e){
    var to={ArrowDown:r+1,ArrowUp:r-1,Home:0,End:qs.length-1}[e.key];
    if(to!==undefined){e.preventDefault();focusQ(to);}
    else if(e.key==="Escape"){st.pin=-1;draw();}});
});
if(layer)layer.addEventListener("change",function(){st.l=+layer.value;draw();});
if(head)head.addEventListener("change",function(){st.h=+head.value;draw();});
var touch=window.matchMedia&&window.matchMedia("(hover: none) and (pointer: coarse)").matches;  // a finger, no mouse
var hint=root.querySelector(".attnx-hint");hint.textContent=touch?D.text.hintTouch:D.text.hint;hint.dataset.i18n=touch?D.hintTouch:D.hint;
if(step)step.addEventListener("input",function(){st.s=+step.value;stepLabel.textContent=D.steps[st.s];draw();});
draw();
}
